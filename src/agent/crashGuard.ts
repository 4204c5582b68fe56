// A promise rejected with nobody listening must not kill the agent: Node's
// default (--unhandled-rejections=throw) exits the process, and a library
// bug (a watch callback, a timer) would then stop Service updates on the
// node. The data path does not need the process (the kernel serves from the
// pinned maps), but a live agent keeps the maps in step; so log it, count
// it and carry on. Exceptions thrown synchronously are not caught here:
// those leave state half-written, and a restart (which adopts the maps) is
// the safer answer.
import type { Logger } from 'pino';

export function installRejectionGuard(log: Logger, count: (reason: string) => void): () => void {
  const onRejection = (reason: unknown) => {
    count('unhandled_rejection');
    const err = reason instanceof Error ? reason : new Error(String(reason));
    log.error({ err, reason: 'unhandled_rejection' }, `unhandled promise rejection (the agent keeps running; the maps keep serving): ${err.message}`);
  };
  process.on('unhandledRejection', onRejection);
  return () => process.off('unhandledRejection', onRejection);
}
