// Settings: API tokens (create, shown once; revoke), custom tools (add, delete; those of
// weir.toml are read-only), and the workspace's model allowlist (read-only, from weir.toml).

import { useCallback, useEffect, useState } from "react";
import { allows, type ModelsOut, type Scope, type TokenOut, type ToolOut } from "../api";
import { useSession } from "../App";
import { since } from "../format";


export function SettingsPage() {
  const { api, session } = useSession();
  const admin = allows(session.scope, "admin");
  const [tokens, setTokens] = useState<TokenOut[]>([]);
  const [tools, setTools] = useState<ToolOut[]>([]);
  const [models, setModels] = useState<ModelsOut | null>(null);
  const [made, setMade] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [name, setName] = useState("");
  const [scope, setScope] = useState<Scope>("read");
  const [toolName, setToolName] = useState("");
  const [toolDef, setToolDef] = useState('{"kind": "http", "method": "GET", "url": "https://example.com/{id}", "description": "…"}');

  const load = useCallback(async () => {
    try {
      setTools((await api.request<{ tools: ToolOut[] }>("GET", "/api/tools")).tools);
      setModels(await api.request<ModelsOut>("GET", "/api/models"));
      if (admin) setTokens((await api.request<{ tokens: TokenOut[] }>("GET", "/api/tokens")).tokens);
    } catch (e) {
      setError(String(e));
    }
  }, [api, admin]);
  useEffect(() => void load(), [load]);

  const act = async (f: () => Promise<unknown>) => {
    try {
      await f();
      setError(null);
      await load();
    } catch (e) {
      setError(String(e));
    }
  };

  return (
    <section>
      <h2>Settings</h2>
      {error && <p className="error" role="alert">{error}</p>}
      {admin && (
        <>
          <h3>API tokens</h3>
          <form className="inline" onSubmit={(e) => (e.preventDefault(), void act(async () => {
            const t = await api.request<{ token: string }>("POST", "/api/tokens", { name, scope });
            setMade(t.token);
            setName("");
          }))}>
            <input aria-label="token name" placeholder="name" value={name} onChange={(e) => setName(e.target.value)} />
            <select aria-label="token scope" value={scope} onChange={(e) => setScope(e.target.value as Scope)}>
              {["read", "run", "approve", "admin"].map((s) => <option key={s}>{s}</option>)}
            </select>
            <button type="submit" disabled={!name.trim()}>Create token</button>
          </form>
          {made && (
            <p className="made" role="status">
              New token (shown this once): <code>{made}</code>{" "}
              <button className="link" onClick={() => void navigator.clipboard?.writeText(made)}>copy</button>
            </p>
          )}
          <table>
            <thead><tr><th>id</th><th>name</th><th>scope</th><th>created</th><th /></tr></thead>
            <tbody>
              {tokens.map((t) => (
                <tr key={t.id}>
                  <td><code>{t.id}</code></td>
                  <td>{t.name}</td>
                  <td>{t.scope}</td>
                  <td>{since(t.created_at)}</td>
                  <td>
                    {t.revoked_at ? <span className="muted">revoked</span> : t.id === session.token_id ? <span className="muted">this session</span> : (
                      <button onClick={() => void act(() => api.request("DELETE", `/api/tokens/${t.id}`))}>Revoke {t.name}</button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <h3>Custom tools</h3>
      <p className="muted">Used in workflows as <code>custom:NAME</code>. Those from weir.toml are read-only here.</p>
      <table>
        <thead><tr><th>name</th><th>from</th><th>kind</th><th>description</th><th /></tr></thead>
        <tbody>
          {tools.map((t) => (
            <tr key={t.name}>
              <td><code>{t.name}</code></td>
              <td>{t.source}</td>
              <td>{String(t.definition.kind ?? "")}</td>
              <td>{String(t.definition.description ?? "")}</td>
              <td>{admin && t.source === "api" && <button onClick={() => void act(() => api.request("DELETE", `/api/tools/${encodeURIComponent(t.name)}`))}>Delete {t.name}</button>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {admin && (
        <form onSubmit={(e) => (e.preventDefault(), void act(async () => {
          await api.request("POST", "/api/tools", { name: toolName, ...JSON.parse(toolDef) });
          setToolName("");
        }))}>
          <label>Tool name<input aria-label="tool name" value={toolName} onChange={(e) => setToolName(e.target.value)} /></label>
          <label>Definition (the fields of a <code>[tools.NAME]</code> table, as JSON)
            <textarea aria-label="tool definition" rows={3} value={toolDef} onChange={(e) => setToolDef(e.target.value)} />
          </label>
          <button type="submit" disabled={!toolName.trim()}>Add tool</button>
        </form>
      )}
      <h3>Models</h3>
      {models && (
        <ul>
          <li>Allowed models: {models.allow ? models.allow.map((m) => <code key={m}>{m} </code>) : "every model"}</li>
          <li>Allowed providers: {models.providers ? models.providers.join(", ") : "every provider"}</li>
          {models.named_providers.length > 0 && <li>Named providers: {models.named_providers.join(", ")}</li>}
        </ul>
      )}
      <p className="muted">The allowlist is set in weir.toml (<code>[models] allow</code>, <code>[providers] allow</code>).</p>
    </section>
  );
}
