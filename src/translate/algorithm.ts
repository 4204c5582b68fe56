// Per-Service backend selection algorithm (issue 15): the annotation, the
// agent default, and kube-proxy's IPVS scheduler names mapped onto ours.
// Pure: no I/O. The data path reads the result from the master entry's
// `algorithm` field (LB_ALG_* in native/sluice_abi.h).
import type { V1Service } from '@kubernetes/client-node';
import type { LbAlgorithm, TranslateProblem } from '../model/frontend';

/** The annotation that chooses a Service's algorithm. */
export const LB_ALGORITHM_ANNOTATION = 'sluice.io/lb-algorithm';

export const DEFAULT_LB_ALGORITHM: LbAlgorithm = 'random';

/** Names accepted: ours, and the IPVS schedulers we implement (ipvsadm -s). */
const ACCEPTED: Record<string, LbAlgorithm> = {
  random: 'random',
  'round-robin': 'round-robin',
  rr: 'round-robin',
  'source-hash': 'source-hash',
  sh: 'source-hash',
  'least-connection': 'least-connection',
  lc: 'least-connection',
  maglev: 'maglev',
  mh: 'maglev',
};

/** IPVS schedulers that are refused, and why (kept in docs/algorithms.md too). */
const NOT_IMPLEMENTED: Record<string, string> = {
  wrr: 'weighted schedulers need endpoint weights, which Kubernetes does not have',
  wlc: 'weighted schedulers need endpoint weights, which Kubernetes does not have',
  sed: 'shortest expected delay weighs connection counts by endpoint weights, which Kubernetes does not have (without weights it is least-connection: use lc)',
  nq: 'never queue weighs connection counts by endpoint weights, which Kubernetes does not have (without weights it is least-connection: use lc)',
  dh: 'destination hashing picks by the destination, which is the Service itself',
  lblc: 'locality-based schedulers need connection counts per destination, not implemented',
  lblcr: 'locality-based schedulers need connection counts per destination, not implemented',
};

export type AlgorithmParse = { algorithm: LbAlgorithm } | { error: string };

/** An algorithm name (ours or an IPVS scheduler name, case-insensitive, trimmed). */
export function parseLbAlgorithm(value: string): AlgorithmParse {
  const name = value.trim().toLowerCase();
  const algorithm = ACCEPTED[name];
  if (algorithm) return { algorithm };
  const why = NOT_IMPLEMENTED[name];
  const known = 'random, round-robin (rr), source-hash (sh), least-connection (lc), maglev (mh)';
  return { error: why ? `${JSON.stringify(value)} refused: ${why}; use ${known}` : `${JSON.stringify(value)} is not a known algorithm; use ${known}` };
}

/** The agent default (--lb-algorithm, config lbAlgorithm): a refusal is a start-up error. */
export function parseDefaultLbAlgorithm(value: string, what: string): LbAlgorithm {
  const r = parseLbAlgorithm(value);
  if ('error' in r) throw new Error(`${what}: ${r.error}`);
  return r.algorithm;
}

/**
 * The Service's algorithm: its annotation when valid, else the default. An
 * invalid annotation adds an 'unknown_lb_algorithm' problem (logged and
 * counted in sluice_errors_total by the agent) and keeps the default.
 */
export function serviceLbAlgorithm(svc: V1Service, fallback: LbAlgorithm, object: string, problems: TranslateProblem[]): LbAlgorithm {
  const value = svc.metadata?.annotations?.[LB_ALGORITHM_ANNOTATION];
  if (value === undefined) return fallback;
  const r = parseLbAlgorithm(value);
  if ('algorithm' in r) return r.algorithm;
  problems.push({
    object,
    reason: 'unknown_lb_algorithm',
    message: `${object}: annotation ${LB_ALGORITHM_ANNOTATION}: ${r.error}; using ${fallback}`,
  });
  return fallback;
}
