import { useEffect, useState } from "preact/hooks";
import { toYaml } from "../lib/yaml";

/** An object shown as YAML text (rendered as text, never as markup). */
export function YamlView({ value, label }: { value: unknown; label: string }) {
  const [text, setText] = useState<string>("");
  useEffect(() => {
    let live = true;
    void toYaml(value).then((t) => live && setText(t));
    return () => {
      live = false;
    };
  }, [value]);
  return (
    <pre class="code" aria-label={label} tabIndex={0} data-testid="yaml">
      {text}
    </pre>
  );
}
