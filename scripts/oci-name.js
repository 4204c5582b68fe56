#!/usr/bin/env node
// oci-name.js OCI_LAYOUT_DIR NAME: give the layout's image the name containerd
// imports it under (`ctr images import` reads the io.containerd.image.name
// annotation of each index entry), e.g. docker.io/library/sluice:0.1.0.
'use strict';
const fs = require('fs');
const [dir, name] = process.argv.slice(2);
if (!dir || !name) {
  process.stderr.write('usage: oci-name.js OCI_LAYOUT_DIR NAME\n');
  process.exit(2);
}
const file = `${dir}/index.json`;
const index = JSON.parse(fs.readFileSync(file, 'utf8'));
for (const m of index.manifests) m.annotations = { ...m.annotations, 'io.containerd.image.name': name };
fs.writeFileSync(file, JSON.stringify(index));
