#!/usr/bin/env node
// Edit the node's CNI configuration for chaining (called by install-cni.sh).
//
//   node conflist.js insert DIR PLUGIN_JSON   put PLUGIN_JSON last in the primary config
//   node conflist.js remove DIR               take every {"type":"sluice"} entry out again
//   node conflist.js primary DIR              print the primary config's file name
//
// The primary config is the one the container runtime uses: the first file
// of DIR, in name order, ending in .conflist, .conf or .json. A single-plugin
// .conf/.json becomes FILE.conflist (with the plugin in `plugins`) and the
// original moves to FILE.sluice-orig, where the runtime does not look; removal
// puts it back. Every write goes to a temporary file first and is renamed in
// place, so the runtime never reads a half-written config. Idempotent: a config
// that already says what we want is not rewritten.
'use strict';
const fs = require('fs');
const path = require('path');

const PLUGIN_TYPE = 'sluice';
const ORIG_SUFFIX = '.sluice-orig';

function fail(message) {
  process.stderr.write(`conflist: ${message}\n`);
  process.exit(1);
}

function primaryConfig(dir) {
  let names;
  try {
    names = fs.readdirSync(dir);
  } catch (err) {
    fail(`read ${dir}: ${err.message}`);
  }
  return names.filter((n) => /\.(conflist|conf|json)$/.test(n)).sort()[0];
}

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    fail(`read ${file}: ${err.message}`);
  }
}

function writeAtomically(file, value) {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.sluice-tmp`);
  fs.writeFileSync(tmp, JSON.stringify(value, null, 2) + '\n', { mode: 0o644 });
  fs.renameSync(tmp, file);
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function insert(dir, plugin) {
  if (plugin.type !== PLUGIN_TYPE) fail(`plugin entry must have "type": "${PLUGIN_TYPE}", got ${JSON.stringify(plugin)}`);
  const name = primaryConfig(dir);
  if (!name) fail(`no CNI network configuration (*.conflist, *.conf, *.json) in ${dir}: install the primary CNI first`);
  const file = path.join(dir, name);
  const conf = readJson(file);
  if (Array.isArray(conf.plugins)) {
    const others = conf.plugins.filter((p) => p.type !== PLUGIN_TYPE);
    const wanted = { ...conf, plugins: [...others, plugin] };
    if (same(conf, wanted)) return `${name}: already chained`;
    writeAtomically(file, wanted);
    return `${name}: chained ${PLUGIN_TYPE} after ${others.map((p) => p.type).join(', ')}`;
  }
  if (typeof conf.type !== 'string') fail(`${file}: neither a conflist ("plugins") nor a plugin config ("type")`);
  // A single-plugin config: make it a list, keep the original for removal.
  const { cniVersion, name: netName, ...first } = conf;
  const list = path.join(dir, `${name.replace(/\.(conf|json)$/, '')}.conflist`);
  writeAtomically(list, { cniVersion: cniVersion ?? '0.4.0', name: netName, plugins: [first, plugin] });
  fs.renameSync(file, file + ORIG_SUFFIX);
  return `${name}: converted to ${path.basename(list)} with ${PLUGIN_TYPE} chained after ${first.type}`;
}

function remove(dir) {
  const done = [];
  let names;
  try {
    names = fs.readdirSync(dir);
  } catch (err) {
    if (err.code === 'ENOENT') return [`${dir} does not exist: nothing to remove`];
    fail(`read ${dir}: ${err.message}`);
  }
  for (const orig of names.filter((n) => n.endsWith(ORIG_SUFFIX))) {
    const restored = orig.slice(0, -ORIG_SUFFIX.length);
    const generated = `${restored.replace(/\.(conf|json)$/, '')}.conflist`;
    fs.renameSync(path.join(dir, orig), path.join(dir, restored));
    if (fs.existsSync(path.join(dir, generated))) fs.unlinkSync(path.join(dir, generated));
    done.push(`${restored}: restored (removed ${generated})`);
  }
  for (const name of fs.readdirSync(dir).filter((n) => /\.(conflist|conf|json)$/.test(n))) {
    const file = path.join(dir, name);
    let conf;
    try {
      conf = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch {
      continue; // not ours to judge
    }
    if (!Array.isArray(conf.plugins) || !conf.plugins.some((p) => p.type === PLUGIN_TYPE)) continue;
    writeAtomically(file, { ...conf, plugins: conf.plugins.filter((p) => p.type !== PLUGIN_TYPE) });
    done.push(`${name}: removed ${PLUGIN_TYPE}`);
  }
  return done.length ? done : ['no configuration mentions sluice: nothing to remove'];
}

const [command, dir, pluginJson] = process.argv.slice(2);
if (!dir) fail('usage: conflist.js insert DIR PLUGIN_JSON | remove DIR | primary DIR');
if (command === 'insert') {
  let plugin;
  try {
    plugin = JSON.parse(pluginJson ?? `{"type":"${PLUGIN_TYPE}"}`);
  } catch (err) {
    fail(`plugin entry is not JSON: ${err.message}`);
  }
  process.stdout.write(insert(dir, plugin) + '\n');
} else if (command === 'remove') {
  process.stdout.write(remove(dir).join('\n') + '\n');
} else if (command === 'primary') {
  const name = primaryConfig(dir);
  if (!name) process.exit(1);
  process.stdout.write(name + '\n');
} else {
  fail(`unknown command ${JSON.stringify(command)}`);
}
