import { describe, expect, it } from "vitest";
import { duration, money, traceId } from "./format";

describe("format", () => {
  it("gives a run's trace id as its id's 32 hex digits", () => {
    expect(traceId("1A2B3C4D-797c-4084-a937-202fedfb7624")).toBe("1a2b3c4d797c4084a937202fedfb7624");
    expect(traceId("1a2b3c4d-797c-4084-a937-202fedfb7624")).toHaveLength(32);
  });
  it("formats durations and money", () => {
    expect(duration(1500)).toBe("1.5 s");
    expect(money(0)).toBe("$0");
  });
});
