// Kubernetes protobuf list decoders for the two big lists the agent reads
// (Services, EndpointSlices): see wire.ts, meta.ts, service.ts, endpointSlice.ts.
export { ProtoError } from './wire';
export { PROTOBUF_CONTENT_TYPE, type OpenedList, type DecodedList } from './meta';
export { openServiceList } from './service';
export { openEndpointSliceList } from './endpointSlice';
export { encodeList, canEncodeList } from './encode';
