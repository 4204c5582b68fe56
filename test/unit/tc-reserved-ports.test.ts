// The SNAT range is added to net.ipv4.ip_local_reserved_ports without
// dropping what the node had reserved already.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatPortRanges, parsePortRanges, withReservedRange } from '../../src/datapath/tc/reservedPorts';

test('an empty list gets the range', () => {
  assert.equal(withReservedRange('', 61000, 65535), '61000-65535');
});

test('existing ports stay; overlapping and adjacent ranges merge', () => {
  assert.equal(withReservedRange('8080,60000-61500', 61000, 65535), '8080,60000-65535');
  assert.equal(withReservedRange('60999', 61000, 65535), '60999-65535');
  assert.equal(withReservedRange('61000-65535', 61000, 65535), '61000-65535');
});

test('bad sysctl content is an error naming the part', () => {
  assert.throws(() => parsePortRanges('80,abc'), /"abc" is not a port or port range/);
  assert.throws(() => parsePortRanges('70000'), /not a port/);
  assert.equal(formatPortRanges([[5, 5], [1, 3], [4, 4]]), '1-5');
});
