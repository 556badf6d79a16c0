// The call sites of functions by the TypeScript compiler's language service (findReferences),
// for bench/codegraph.py's reference accuracy on a TypeScript repository.
// stdin: {"root": dir, "files": [paths under root], "queries": [{"path", "line", "name"}]}
// stdout: one JSON array per query, of [path, line] call sites: references that are not the
// definition, inside the root, followed by `(` (as the bench counts jedi's).
// `typescript` (5.x: 7 has no JavaScript API) is found through NODE_PATH.
const fs = require("fs");
const path = require("path");
const ts = require("typescript");

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const root = path.resolve(input.root);
const files = input.files.map((f) => path.join(root, f));
const texts = new Map();
const read = (file) => {
  if (!texts.has(file)) texts.set(file, fs.existsSync(file) ? fs.readFileSync(file, "utf8") : undefined);
  return texts.get(file);
};
const options = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  allowImportingTsExtensions: true,
  noEmit: true,
  strict: true,
  skipLibCheck: true,
  jsx: ts.JsxEmit.Preserve,
};
const host = {
  getScriptFileNames: () => files,
  getScriptVersion: () => "1",
  getScriptSnapshot: (file) => {
    const text = read(file);
    return text === undefined ? undefined : ts.ScriptSnapshot.fromString(text);
  },
  getCurrentDirectory: () => root,
  getCompilationSettings: () => options,
  getDefaultLibFileName: (o) => ts.getDefaultLibFilePath(o),
  fileExists: (file) => read(file) !== undefined,
  readFile: read,
  readDirectory: ts.sys.readDirectory,
  directoryExists: ts.sys.directoryExists,
  getDirectories: ts.sys.getDirectories,
};
const service = ts.createLanguageService(host, ts.createDocumentRegistry());
const out = [];
for (const q of input.queries) {
  const file = path.join(root, q.path);
  const text = read(file);
  const lines = text.split("\n");
  let offset = 0;
  for (let i = 0; i < q.line - 1; i++) offset += lines[i].length + 1;
  const column = lines[q.line - 1].indexOf(q.name);
  const sites = new Set();
  const found = column < 0 ? undefined : service.findReferences(file, offset + column);
  for (const symbol of found || []) {
    for (const ref of symbol.references) {
      if (ref.isDefinition) continue;
      const refFile = path.resolve(ref.fileName);
      if (!refFile.startsWith(root + path.sep)) continue;
      const refText = read(refFile);
      const after = refText.slice(ref.textSpan.start + ref.textSpan.length).trimStart();
      if (!after.startsWith("(")) continue;
      const line = refText.slice(0, ref.textSpan.start).split("\n").length;
      sites.add(JSON.stringify([path.relative(root, refFile).split(path.sep).join("/"), line]));
    }
  }
  out.push([...sites].map((s) => JSON.parse(s)));
}
process.stdout.write(JSON.stringify(out));
