// Light/dark theme: follows prefers-color-scheme unless the user picked one (kept in localStorage).
export type ThemeChoice = "system" | "light" | "dark";
const KEY = "tiphys.theme";

export function storedTheme(): ThemeChoice {
  const v = localStorage.getItem(KEY);
  return v === "light" || v === "dark" ? v : "system";
}

export function applyTheme(choice: ThemeChoice): void {
  if (choice === "system") {
    localStorage.removeItem(KEY);
    delete document.documentElement.dataset.theme;
  } else {
    localStorage.setItem(KEY, choice);
    document.documentElement.dataset.theme = choice;
  }
}

export function nextTheme(choice: ThemeChoice): ThemeChoice {
  return choice === "system" ? "light" : choice === "light" ? "dark" : "system";
}
