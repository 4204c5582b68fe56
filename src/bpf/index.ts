// The libbpf binding: import from 'src/bpf' (this file) rather than the modules.
export { BpfError, LibbpfPrintLevel, errnoName, numPossibleCpus, setLibbpfLogSink } from './libbpf';
export type { LibbpfLogSink } from './libbpf';
export * from './constants';
export { BpfMap, mapInfo } from './map';
export type { BatchLookupResult, CreateMapOptions, MapDescription, MapInfo } from './map';
export { BpfObject } from './object';
export type { KeptPinnedSize, OpenOptions } from './object';
export { BpfProgram, progFdById, progInfo, progTestRun } from './program';
export type { ProgInfo, ProgramDescription, TestRunInput, TestRunResult } from './program';
export { BpfLink, linkInfo, unpin } from './link';
export type { LinkInfo } from './link';
export { attachCgroup, cgroupId, cgroupV2Mount, queryCgroup, queryCgroupDetailed } from './cgroup';
export type { CgroupQuery } from './cgroup';
export { BPF_FS_MAGIC, ensureBpffsDir, isBpffs } from './bpffs';
export { BpfIterator, readIter } from './iter';
export { inNetns, netnsInode } from './netns';
export { RingBuffer } from './ringBuffer';
