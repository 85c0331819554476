import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The build lands in the server crate, which embeds it in the `weir` binary
// (`scripts/build-ui`; the committed copy is checked to be current by `scripts/test`).
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "../crates/weir-server/ui-dist",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 2000,
  },
  test: { include: ["src/**/*.test.ts"] },
});
