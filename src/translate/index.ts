// Translate: Kubernetes objects → desired frontends and backends (pure, no I/O).
export { translateService, translateAll, groupSlicesByService, sortFrontends, compareServiceAge, type TranslateAllResult } from './translate';
export { nodeContextFromNode, LABEL_TOPOLOGY_ZONE } from './node';
export {
  shouldSkipService,
  shouldSkipEndpointSlice,
  serviceKey,
  objectKey,
  PROXY_LABEL_SELECTOR,
  LABEL_SERVICE_NAME,
  LABEL_SERVICE_PROXY_NAME,
  LABEL_HEADLESS,
} from './skip';
export { parseIP, parseCIDR, type ParsedIP, type ParsedCIDR } from './ip';
export { LB_ALGORITHM_ANNOTATION, parseLbAlgorithm, parseDefaultLbAlgorithm } from './algorithm';
