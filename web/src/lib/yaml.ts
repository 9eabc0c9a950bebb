// YAML is loaded on demand (its own chunk): the list page never needs it.

export async function toYaml(value: unknown): Promise<string> {
  const { stringify } = await import("yaml");
  return stringify(value, { lineWidth: 0 });
}

/** Parses a document typed by the user: JSON when it looks like JSON, YAML otherwise. */
export async function parseDocument(text: string): Promise<unknown> {
  const t = text.trim();
  if (t.startsWith("{") || t.startsWith("[")) return JSON.parse(t);
  const { parse } = await import("yaml");
  return parse(t);
}
