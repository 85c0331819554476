// The shell: sign-in with a token (from `?token=` as `weir serve` prints it, or typed), the
// navigation, and a small history router over the pages.

import { createContext, useCallback, useContext, useEffect, useState } from "react";
import { Api, ApiError, type Session } from "./api";
import { BuilderPage } from "./pages/Builder";
import { RunPage } from "./pages/Run";
import { RunsPage } from "./pages/Runs";
import { SettingsPage } from "./pages/Settings";
import { WorkflowPage } from "./pages/Workflow";
import { WorkflowsPage } from "./pages/Workflows";

const KEY = "weir.token";

export interface Ctx {
  api: Api;
  session: Session;
  go: (path: string) => void;
}

const SessionCtx = createContext<Ctx | null>(null);

export function useSession(): Ctx {
  const c = useContext(SessionCtx);
  if (!c) throw new Error("no session");
  return c;
}

function usePath(): [string, (p: string) => void] {
  const [path, setPath] = useState(window.location.pathname);
  useEffect(() => {
    const on = () => setPath(window.location.pathname);
    window.addEventListener("popstate", on);
    return () => window.removeEventListener("popstate", on);
  }, []);
  const go = useCallback((p: string) => {
    window.history.pushState(null, "", p);
    setPath(new URL(p, window.location.origin).pathname);
  }, []);
  return [path, go];
}

export function App() {
  const [path, go] = usePath();
  const [ctx, setCtx] = useState<Ctx | null>(null);
  const [error, setError] = useState<string | null>(null);

  const signIn = useCallback(
    async (token: string) => {
      const api = new Api(token.trim());
      try {
        const session = await api.session();
        localStorage.setItem(KEY, token.trim());
        setCtx({ api, session, go });
        setError(null);
      } catch (e) {
        localStorage.removeItem(KEY);
        setCtx(null);
        setError(e instanceof ApiError ? e.message : String(e));
      }
    },
    [go],
  );

  useEffect(() => {
    const url = new URL(window.location.href);
    const fromUrl = url.searchParams.get("token");
    if (fromUrl) {
      // Out of the address bar (and the history) at once.
      url.searchParams.delete("token");
      window.history.replaceState(null, "", url.pathname + url.search);
    }
    const token = fromUrl ?? localStorage.getItem(KEY);
    if (token) void signIn(token);
  }, [signIn]);

  if (!ctx) return <SignIn onToken={signIn} error={error} />;
  const signOut = () => {
    localStorage.removeItem(KEY);
    setCtx(null);
  };
  const runMatch = path.match(/^\/runs\/([^/]+)$/);
  const wfMatch = path.match(/^\/workflows\/([^/]+)$/);
  const editMatch = path.match(/^\/workflows\/([^/]+)\/edit$/);
  return (
    <SessionCtx.Provider value={ctx}>
      <header className="top">
        <a className="brand" href="/runs" onClick={(e) => (e.preventDefault(), go("/runs"))}>
          weir
        </a>
        <nav>
          <Link to="/workflows" path={path}>Workflows</Link>
          <Link to="/runs" path={path}>Runs</Link>
          <Link to="/settings" path={path}>Settings</Link>
        </nav>
        <span className="who" title={`token ${ctx.session.token_id}`}>
          {ctx.session.name} · {ctx.session.scope}
          <button className="link" onClick={signOut}>sign out</button>
        </span>
      </header>
      <main>
        {path === "/settings" ? (
          <SettingsPage />
        ) : runMatch ? (
          <RunPage id={decodeURIComponent(runMatch[1])} />
        ) : path === "/workflows/new" ? (
          <BuilderPage id={null} />
        ) : editMatch ? (
          <BuilderPage id={decodeURIComponent(editMatch[1])} />
        ) : wfMatch ? (
          <WorkflowPage id={decodeURIComponent(wfMatch[1])} />
        ) : path.startsWith("/workflows") ? (
          <WorkflowsPage />
        ) : (
          <RunsPage />
        )}
      </main>
    </SessionCtx.Provider>
  );
}

function Link({ to, path, children }: { to: string; path: string; children: React.ReactNode }) {
  const { go } = useSession();
  return (
    <a
      href={to}
      className={path.startsWith(to) ? "active" : ""}
      onClick={(e) => {
        e.preventDefault();
        go(to);
      }}
    >
      {children}
    </a>
  );
}

function SignIn({ onToken, error }: { onToken: (t: string) => void; error: string | null }) {
  const [token, setToken] = useState("");
  return (
    <form
      className="signin"
      onSubmit={(e) => {
        e.preventDefault();
        onToken(token);
      }}
    >
      <h1>weir</h1>
      <p>Sign in with an API token (`weir serve` prints one on its first start; `weir tokens create` makes more).</p>
      <label>
        Token
        <input
          type="password"
          autoComplete="off"
          value={token}
          onChange={(e) => setToken(e.target.value)}
          placeholder="weir_…"
          autoFocus
        />
      </label>
      {error && <p className="error" role="alert">{error}</p>}
      <button type="submit" disabled={!token.trim()}>Sign in</button>
    </form>
  );
}
