// The page chrome: skip link, navigation, who is logged in, theme toggle and logout.
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { Link } from "./ui";
import { useSession } from "../session";
import { applyTheme, nextTheme, storedTheme, type ThemeChoice } from "../theme";
import { apiUrl } from "../api/http";

const NAV: Array<[string, string]> = [
  ["applications", "Applications"],
  ["settings/projects", "Projects"],
  ["settings/clusters", "Clusters"],
  ["settings/repos", "Repositories"],
  ["user-info", "User info"],
  ["about", "About"],
];

export function Layout(props: { path: string; children: ComponentChildren }) {
  const { user } = useSession();
  const [theme, setTheme] = useState<ThemeChoice>(storedTheme);
  const [menuOpen, setMenuOpen] = useState(false);
  const toggleTheme = () => {
    const next = nextTheme(theme);
    applyTheme(next);
    setTheme(next);
  };
  return (
    <div class="shell">
      <a class="skip" href="#content">
        Skip to content
      </a>
      <header class="topbar">
        <button
          type="button"
          class="menu-toggle"
          aria-expanded={menuOpen}
          aria-controls="nav"
          onClick={() => setMenuOpen(!menuOpen)}
        >
          Menu
        </button>
        <Link to="applications" class="brand">
          tiphys
        </Link>
        <span class="spacer" />
        <button type="button" onClick={toggleTheme} aria-label={`Theme: ${theme}. Change theme`} data-testid="theme">
          Theme: {theme}
        </button>
        <span class="user" data-testid="current-user">
          {user.username}
        </span>
        {/* Logout is a navigation: the server revokes the session and clears the cookie. */}
        <a class="button" href={apiUrl("auth/logout")} data-testid="logout">
          Log out
        </a>
      </header>
      <nav id="nav" class={menuOpen ? "sidebar open" : "sidebar"} aria-label="Main" onClick={() => setMenuOpen(false)}>
        <ul>
          {NAV.map(([to, label]) => (
            <li key={to}>
              <Link to={to} aria-current={props.path === to || props.path.startsWith(`${to}/`) ? "page" : undefined}>
                {label}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <main id="content" tabIndex={-1}>
        {props.children}
      </main>
    </div>
  );
}
