// The root: loads the settings and who is logged in, sends anonymous users to the login page
// (with a return_url), and picks the page for the current route.
import { useEffect, useState } from "preact/hooks";
import { get, setUnauthorizedHandler, errorText } from "./api/http";
import type { Settings, UserInfo } from "./api/types";
import { matchRoute } from "./lib/routes";
import { currentLocation, navigate, navigateAbsolute, useLocation } from "./router";
import { SessionContext } from "./session";
import { Layout } from "./components/Layout";
import { resetCan } from "./components/hooks";
import { ErrorBox, Loading } from "./components/ui";
import { Login } from "./pages/Login";
import { AppList } from "./pages/AppList";
import { AppDetails } from "./pages/AppDetails";
import { AppCreate } from "./pages/AppCreate";
import { Projects } from "./pages/Projects";
import { ProjectDetails } from "./pages/ProjectDetails";
import { Clusters } from "./pages/Clusters";
import { Repos } from "./pages/Repos";
import { AccountPage } from "./pages/Account";
import { About } from "./pages/About";

function toLogin(): void {
  const loc = currentLocation();
  if (loc.path === "login") return;
  const back = location.href;
  navigate(`login?return_url=${encodeURIComponent(back)}`, true);
}

export function App() {
  const loc = useLocation();
  const [settings, setSettings] = useState<Settings>();
  const [user, setUser] = useState<UserInfo>();
  const [error, setError] = useState<string>();
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    setUnauthorizedHandler(() => {
      setUser({});
      toLogin();
    });
  }, []);

  useEffect(() => {
    Promise.all([get<Settings>("api/v1/settings"), get<UserInfo>("api/v1/session/userinfo")]).then(
      ([s, u]) => {
        setSettings(s);
        setUser(u);
      },
      (err) => setError(errorText(err)),
    );
  }, [generation]);

  const route = matchRoute(loc.path);
  const loggedIn = Boolean(user?.loggedIn);

  useEffect(() => {
    if (user && !loggedIn && route.page !== "login") toLogin();
    if (user && loggedIn && route.page === "login") navigate("applications", true);
  }, [user, loggedIn, route.page]);

  useEffect(() => {
    document.title = `${titleOf(route.page)} · tiphys`;
  }, [route.page]);

  if (error) return <main id="content"><ErrorBox error={`Cannot reach the API: ${error}`} /></main>;
  if (!settings || !user) return <main id="content"><Loading /></main>;

  if (route.page === "login" || !loggedIn) {
    if (loggedIn) return <Loading />;
    return (
      <Login
        settings={settings}
        returnUrl={loc.search.get("return_url")}
        onLoggedIn={(to) => {
          resetCan();
          setUser(undefined);
          navigateAbsolute(to);
          setGeneration((g) => g + 1);
        }}
      />
    );
  }

  return (
    <SessionContext.Provider value={{ user, settings }}>
      <Layout path={loc.path}>{page(route, loc.search)}</Layout>
    </SessionContext.Provider>
  );
}

function page(route: ReturnType<typeof matchRoute>, search: URLSearchParams) {
  switch (route.page) {
    case "apps":
      return <AppList search={search} />;
    case "app-new":
      return <AppCreate />;
    case "app":
      return <AppDetails key={`${route.namespace}/${route.name}`} namespace={route.namespace} name={route.name} tab={route.tab} />;
    case "projects":
      return <Projects />;
    case "project":
      return <ProjectDetails key={route.name} name={route.name} />;
    case "clusters":
      return <Clusters />;
    case "repos":
      return <Repos />;
    case "account":
      return <AccountPage />;
    case "about":
      return <About />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>There is no page here.</p>
        </section>
      );
  }
}

function titleOf(page: string): string {
  const titles: Record<string, string> = {
    login: "Log in",
    apps: "Applications",
    "app-new": "New application",
    app: "Application",
    projects: "Projects",
    project: "Project",
    clusters: "Clusters",
    repos: "Repositories",
    account: "User info",
    about: "About",
  };
  return titles[page] ?? "Not found";
}
