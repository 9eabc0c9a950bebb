// Entry point: theme first (no flash), then the dashboard.
import { render } from "preact";
import { App } from "./App";
import { installLinkInterception } from "./router";
import { applyTheme, storedTheme } from "./theme";

applyTheme(storedTheme());
installLinkInterception();
const root = document.getElementById("app");
if (root) {
  root.replaceChildren(); // the static "Loading" placeholder of index.html
  render(<App />, root);
}
