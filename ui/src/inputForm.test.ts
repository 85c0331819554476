import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseDocument } from "./graph";
import { inputFields, inputValue } from "./inputForm";

describe("the input form of a workflow's schema", () => {
  it("a field per property, values typed, required ones required", () => {
    const doc = parseDocument(readFileSync(join(__dirname, "../../examples/machine/deploy-gate.yaml"), "utf8"), "yaml") as { input: unknown };
    const fields = inputFields(doc.input)!;
    expect(fields).toEqual([{ name: "env", path: ["env"], kind: "string", required: false, description: undefined, choices: undefined }]);
    const schema = { type: "object", required: ["n"], properties: { n: { type: "integer" }, ok: { type: "boolean" }, tags: { type: "array" }, env: { type: "string", enum: ["a", "b"] } } };
    const f = inputFields(schema)!;
    expect(f.map((x) => x.kind)).toEqual(["integer", "boolean", "json", "string"]);
    expect(f[3].choices).toEqual(["a", "b"]);
    expect(inputValue(f, { n: "3", ok: "true", tags: '["x"]', env: "" })).toEqual({ value: { n: 3, ok: true, tags: ["x"] }, errors: [] });
    expect(inputValue(f, { n: "", tags: "[" }).errors).toEqual(["n is required", "tags must be JSON"]);
    expect(inputValue(f, { n: "1.5" }).errors).toEqual(["n must be an integer"]);
    expect(inputFields({ type: "string" })).toBeNull();
  });
});

describe("nested input schemas", () => {
  it("a nested object's properties become dotted fields and build the nested value", () => {
    const schema = {
      type: "object",
      required: ["customer"],
      properties: {
        customer: { type: "object", required: ["name"], properties: { name: { type: "string" }, address: { type: "object", properties: { city: { type: "string" } } } } },
        meta: { type: "object", properties: { priority: { type: "integer" } } },
      },
    };
    const f = inputFields(schema)!;
    expect(f.map((x) => [x.name, x.required])).toEqual([
      ["customer.name", true],
      ["customer.address.city", false],
      ["meta.priority", false],
    ]);
    expect(inputValue(f, { "customer.name": "Ada", "customer.address.city": "Oslo" })).toEqual({ value: { customer: { name: "Ada", address: { city: "Oslo" } } }, errors: [] });
    expect(inputValue(f, {}).errors).toEqual(["customer.name is required"]);
  });
});
