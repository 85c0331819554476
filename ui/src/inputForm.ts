// A run's input form from the workflow's input JSON Schema (machine documents declare one):
// a field per property of a simple type, nested objects' properties as dotted fields
// (`address.city`); anything else (arrays, free objects) is typed as JSON.

export interface InputField {
  /** The dotted path, as the form labels it. */
  name: string;
  path: string[];
  kind: "string" | "number" | "integer" | "boolean" | "json";
  required: boolean;
  description?: string;
  choices?: string[];
}

type Obj = Record<string, unknown>;

export function inputFields(schema: unknown): InputField[] | null {
  const s = (schema ?? {}) as Obj;
  const props = s.properties as Record<string, Obj> | undefined;
  if (s.type !== "object" || !props) return null;
  return fieldsOf(s, [], true);
}

function fieldsOf(s: Obj, at: string[], required: boolean): InputField[] {
  const props = (s.properties ?? {}) as Record<string, Obj>;
  const req = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  return Object.entries(props).flatMap(([name, p]): InputField[] => {
    const path = [...at, name];
    const t = p.type;
    if (t === "object" && p.properties && typeof p.properties === "object") return fieldsOf(p, path, required && req.has(name));
    const kind = t === "string" || t === "number" || t === "integer" || t === "boolean" ? t : "json";
    return [
      {
        name: path.join("."),
        path,
        kind,
        required: required && req.has(name),
        description: typeof p.description === "string" ? p.description : undefined,
        choices: Array.isArray(p.enum) ? p.enum.map(String) : undefined,
      },
    ];
  });
}

function place(value: Obj, path: string[], v: unknown) {
  let o = value;
  for (const k of path.slice(0, -1)) o = (o[k] ??= {}) as Obj;
  o[path[path.length - 1]] = v;
}

/** The input object from the form's raw values; an empty optional field is left out. */
export function inputValue(fields: InputField[], raw: Record<string, string>): { value: Obj; errors: string[] } {
  const value: Obj = {};
  const errors: string[] = [];
  for (const f of fields) {
    const [v, err] = one(f, raw[f.name] ?? "");
    if (err) errors.push(err);
    else if (v !== undefined) place(value, f.path, v);
  }
  return { value, errors };
}

function one(f: InputField, raw: string): [unknown, string | null] {
  const r = raw.trim();
  if (r === "") return [undefined, f.required ? `${f.name} is required` : null];
  switch (f.kind) {
    case "string":
      return [raw, null];
    case "number":
    case "integer": {
      const n = Number(r);
      if (Number.isNaN(n) || (f.kind === "integer" && !Number.isInteger(n))) return [undefined, `${f.name} must be ${f.kind === "integer" ? "an integer" : "a number"}`];
      return [n, null];
    }
    case "boolean":
      return [r === "true", null];
    default:
      try {
        return [JSON.parse(r), null];
      } catch {
        return [undefined, `${f.name} must be JSON`];
      }
  }
}
