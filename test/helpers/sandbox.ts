// Test side of the lab (src/lab): the same sandbox the demo uses.
export * from '../../src/lab/sandbox';
