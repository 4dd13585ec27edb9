// Builds the page into the Python package, where `streamflow ui` serves it from /static/.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  base: "/static/",
  build: {
    outDir: fileURLToPath(new URL("../streamflow/operator/web/static", import.meta.url)),
    emptyOutDir: true,
    assetsInlineLimit: 0, // no data: URLs for scripts; the CSP allows 'self' only
    chunkSizeWarningLimit: 1024,
  },
});
