#!/usr/bin/env node
// `tamp-guest build APP.js -o strategy.wasm`: builds a strategy into a WebAssembly component,
// from any directory.
//
// componentize-js maps its working directory to the guest's `/` while it runs the app's top
// level, so an app loads only the files under it. This build therefore stages, in a temporary
// directory, the app's directory (its relative imports), the SDK (the app's `"tamp-guest"`
// imports pointed at it) and an entry module that binds the WIT's host import to the SDK and
// exports the app's `strategy`; then it runs the componentize-js this package pins (refusing
// another version) there, against the WIT package shipped in this package's `wit/`, with
// every WASI feature disabled (tamp refuses a component that imports WASI).

import { spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const COMPONENTIZE_JS = "0.23.0";
export const DISABLED_FEATURES = ["stdio", "random", "clocks", "http", "fetch-event"];
const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const WIT = join(PACKAGE, "wit");
// The WIT's package version: the host import the entry binds.
const WIT_VERSION = /package tamp:strategy@([0-9.]+);/.exec(readFileSync(join(WIT, "tamp-strategy.wit"), "utf8"))[1];

function fail(message) {
  console.error(`tamp-guest: ${message}`);
  process.exit(1);
}

/// The componentize-js CLI: the one this package depends on, or `TAMP_GUEST_COMPONENTIZE_JS`
/// (the path of its `src/cli.js`), checked to be the pinned version.
function componentizeJs() {
  let cli = process.env.TAMP_GUEST_COMPONENTIZE_JS;
  if (!cli) {
    try {
      cli = join(dirname(fileURLToPath(import.meta.resolve("@bytecodealliance/componentize-js"))), "cli.js");
    } catch {
      fail(`componentize-js is not installed beside tamp-guest; npm install @bytecodealliance/componentize-js@${COMPONENTIZE_JS}`);
    }
  }
  const manifest = join(dirname(cli), "..", "package.json");
  const version = existsSync(manifest) ? JSON.parse(readFileSync(manifest, "utf8")).version : "unknown";
  if (version !== COMPONENTIZE_JS) {
    fail(`componentize-js ${version} is installed (${cli}); this SDK is built and tested with ${COMPONENTIZE_JS}`);
  }
  return cli;
}

/// Points every `"tamp-guest"` import of the JavaScript files under `dir` at `sdk`.
function pointImportsAt(dir, sdk) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      pointImportsAt(path, sdk);
    } else if (/\.m?js$/.test(name)) {
      let target = relative(dirname(path), sdk).split(sep).join("/");
      if (!target.startsWith(".")) target = `./${target}`;
      const source = readFileSync(path, "utf8");
      const pointed = source.replace(/(\bfrom\s*|\bimport\s*\(?\s*)(["'])tamp-guest\2/g, `$1$2${target}$2`);
      if (pointed !== source) writeFileSync(path, pointed);
    }
  }
}

export function build(app, output) {
  const cli = componentizeJs();
  app = resolve(app);
  if (!existsSync(app) || !/\.m?js$/.test(app)) fail(`${app}: not a JavaScript file`);
  output = resolve(output);
  const staging = mkdtempSync(join(tmpdir(), "tamp-guest-"));
  try {
    const appDir = join(staging, "app");
    cpSync(dirname(app), appDir, {
      recursive: true,
      filter: (src) => !["node_modules", ".git"].includes(basename(src)),
    });
    cpSync(join(PACKAGE, "tamp-guest.js"), join(staging, "tamp-guest.js"));
    pointImportsAt(appDir, join(staging, "tamp-guest.js"));
    writeFileSync(
      join(staging, "entry.js"),
      `import * as host from "tamp:strategy/host@${WIT_VERSION}";\n` +
        `import { bindHost } from "./tamp-guest.js";\n` +
        `import { strategy as appStrategy } from "./app/${basename(app)}";\n` +
        `bindHost(host);\n` +
        `export const strategy = appStrategy;\n`,
    );
    const args = [cli, "entry.js", "--wit", WIT, "--world-name", "plugin", "--disable", ...DISABLED_FEATURES, "--out", output];
    const done = spawnSync(process.execPath, args, { cwd: staging, stdio: "inherit" });
    if (done.status !== 0) fail(`componentize-js failed (${done.status ?? done.signal})`);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  console.log(`built ${output}`);
}

function main(argv) {
  const usage = "usage: tamp-guest build APP.js [-o strategy.wasm] | tamp-guest wit";
  const [command, ...rest] = argv;
  if (command === "wit") {
    console.log(WIT);
    return;
  }
  if (command !== "build") fail(usage);
  let app;
  let output = "strategy.wasm";
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === "-o" || rest[i] === "--output") output = rest[++i];
    else if (app === undefined) app = rest[i];
    else fail(usage);
  }
  if (app === undefined || output === undefined) fail(usage);
  build(app, output);
}

// Run as a command (npm links it into node_modules/.bin), not imported.
if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  main(process.argv.slice(2));
}
