#!/usr/bin/env node
// Apply a user's ConfigMap overrides to rendered Sluice manifests, in place:
//
//   node configmap-overrides.js MANIFESTS.yaml KEY=VALUE... [data:KEY=VALUE...]
//
// KEY=VALUE sets a field of the agent's config.yaml (VALUE parsed as YAML, so
// `devices=[eth0]` is a list); data:KEY=VALUE sets a key of the ConfigMap
// itself (`data:cni-chaining=true`). Everything else in the manifests is left
// as shipped: these are the edits docs/deploy.md tells a user to make.
'use strict';
const fs = require('fs');
const YAML = require('yaml');

const [file, ...sets] = process.argv.slice(2);
if (!file || sets.length === 0) {
  process.stderr.write('usage: configmap-overrides.js MANIFESTS.yaml KEY=VALUE... [data:KEY=VALUE...]\n');
  process.exit(2);
}
const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
const cm = docs.find((d) => d.get('kind') === 'ConfigMap' && d.getIn(['metadata', 'name']) === 'sluice');
if (!cm) {
  process.stderr.write(`configmap-overrides: no ConfigMap "sluice" in ${file}\n`);
  process.exit(1);
}
const config = YAML.parseDocument(cm.getIn(['data', 'config.yaml']));
for (const s of sets) {
  const eq = s.indexOf('=');
  if (eq < 1) { process.stderr.write(`configmap-overrides: '${s}' is not KEY=VALUE\n`); process.exit(2); }
  const key = s.slice(0, eq);
  const value = s.slice(eq + 1);
  if (key.startsWith('data:')) cm.setIn(['data', key.slice(5)], value);
  else config.set(key, YAML.parse(value));
}
cm.setIn(['data', 'config.yaml'], config.toString());
fs.writeFileSync(file, docs.map((d) => d.toString()).join('---\n'));
