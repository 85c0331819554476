// A run's input form from the workflow's input JSON Schema (machine documents declare one):
// a field per top-level property of a simple type; anything else is typed as JSON.

export interface InputField {
  name: string;
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
  const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  return Object.entries(props).map(([name, p]) => {
    const t = p.type;
    const kind = t === "string" || t === "number" || t === "integer" || t === "boolean" ? t : "json";
    return {
      name,
      kind,
      required: required.has(name),
      description: typeof p.description === "string" ? p.description : undefined,
      choices: Array.isArray(p.enum) ? p.enum.map(String) : undefined,
    };
  });
}

/** The input object from the form's raw values; an empty optional field is left out. */
export function inputValue(fields: InputField[], raw: Record<string, string>): { value: Obj; errors: string[] } {
  const value: Obj = {};
  const errors: string[] = [];
  for (const f of fields) {
    const r = (raw[f.name] ?? "").trim();
    if (r === "") {
      if (f.required) errors.push(`${f.name} is required`);
      continue;
    }
    switch (f.kind) {
      case "string":
        value[f.name] = raw[f.name];
        break;
      case "number":
      case "integer": {
        const n = Number(r);
        if (Number.isNaN(n) || (f.kind === "integer" && !Number.isInteger(n))) errors.push(`${f.name} must be ${f.kind === "integer" ? "an integer" : "a number"}`);
        else value[f.name] = n;
        break;
      }
      case "boolean":
        value[f.name] = r === "true";
        break;
      default:
        try {
          value[f.name] = JSON.parse(r);
        } catch {
          errors.push(`${f.name} must be JSON`);
        }
    }
  }
  return { value, errors };
}
