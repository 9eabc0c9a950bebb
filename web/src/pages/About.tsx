// Server and dashboard versions.
import type { VersionMessage } from "../api/types";
import { useGet } from "../components/hooks";
import { ErrorBox, KeyValues, Loading } from "../components/ui";

declare const __UI_VERSION__: string;

export function About() {
  const v = useGet<VersionMessage>("api/version");
  return (
    <section class="narrow">
      <h1>About</h1>
      <ErrorBox error={v.error} />
      {v.loading && !v.data ? (
        <Loading />
      ) : (
        <KeyValues
          rows={[
            ["Server version", <span data-testid="server-version">{v.data?.Version ?? "unknown"}</span>],
            ["Build date", v.data?.BuildDate || "–"],
            ["Git commit", v.data?.GitCommit || "–"],
            ["Platform", v.data?.Platform || "–"],
            ["Dashboard version", <span data-testid="ui-version">{__UI_VERSION__}</span>],
          ]}
        />
      )}
    </section>
  );
}
