// List calls for the informers that return the API server's JSON as plain
// objects. client-node's typed list methods run every object through its
// ObjectSerializer (class instances with every optional field present): at
// 10k Services and 10k EndpointSlices that is most of the cold-start time and
// a large share of the agent's memory, and the watch stream already hands us
// plain objects. Same request, same credentials (applyToFetchOptions).
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';

type Fetch = (url: string, init: unknown) => Promise<{ status: number; statusText: string; text(): Promise<string> }>;
// node-fetch 2 is what client-node itself uses for watches (agents, TLS, auth plugins).
// eslint-disable-next-line @typescript-eslint/no-var-requires
const fetch = require('node-fetch') as Fetch;

export class ListError extends Error {
  constructor(message: string, readonly statusCode: number) {
    super(message);
  }
}

export function rawLister<T extends KubernetesObject>(kc: KubeConfig, path: string, query: Record<string, string | undefined>): () => Promise<KubernetesListObject<T>> {
  return async () => {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    const url = new URL(cluster.server.replace(/\/$/, '') + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, v);
    const init = (await kc.applyToFetchOptions({})) as Record<string, unknown>;
    init.method = 'GET';
    const res = await fetch(url.toString(), init);
    const body = await res.text();
    if (res.status !== 200) throw new ListError(`list ${path}: HTTP ${res.status} ${res.statusText}: ${body.slice(0, 200)}`, res.status);
    return JSON.parse(body) as KubernetesListObject<T>;
  };
}
