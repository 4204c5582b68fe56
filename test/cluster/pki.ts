// Locally generated credentials for the test control plane, made with the
// machine's openssl: one CA, the API server's serving certificate, an admin
// client certificate (O=system:masters) and the service-account signing key.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from './proc';

export interface Pki {
  dir: string;
  caCert: string;
  caKey: string;
  serverCert: string;
  serverKey: string;
  adminCert: string;
  adminKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
}

const DAYS = '3';

async function openssl(...args: string[]): Promise<void> {
  await run(['openssl', ...args], { timeoutMs: 30_000 });
}

async function signedCert(dir: string, name: string, subject: string, caCert: string, caKey: string, ext: string): Promise<void> {
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const extFile = join(dir, `${name}.ext`);
  writeFileSync(extFile, ext);
  await openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key);
  await openssl('req', '-new', '-key', key, '-subj', subject, '-out', csr);
  await openssl('x509', '-req', '-in', csr, '-CA', caCert, '-CAkey', caKey, '-CAcreateserial',
    '-days', DAYS, '-sha256', '-extfile', extFile, '-out', join(dir, `${name}.crt`));
}

/** Generate every credential into `dir`. `serviceIp` is the first address of the service range (the kubernetes Service). */
export async function generatePki(dir: string, serviceIp: string): Promise<Pki> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const caKey = join(dir, 'ca.key');
  const caCert = join(dir, 'ca.crt');
  await openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', caKey);
  await openssl('req', '-x509', '-new', '-key', caKey, '-subj', '/CN=sluice-test-ca', '-days', DAYS, '-sha256',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-out', caCert);
  await signedCert(dir, 'apiserver', '/CN=kube-apiserver', caCert, caKey, [
    'basicConstraints=CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=serverAuth',
    `subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:${serviceIp}`,
    '',
  ].join('\n'));
  await signedCert(dir, 'admin', '/O=system:masters/CN=sluice-test-admin', caCert, caKey, [
    'basicConstraints=CA:FALSE',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=clientAuth',
    '',
  ].join('\n'));
  const serviceAccountKey = join(dir, 'sa.key');
  const serviceAccountPub = join(dir, 'sa.pub');
  await openssl('genrsa', '-out', serviceAccountKey, '2048');
  await openssl('rsa', '-in', serviceAccountKey, '-pubout', '-out', serviceAccountPub);
  return {
    dir, caCert, caKey,
    serverCert: join(dir, 'apiserver.crt'), serverKey: join(dir, 'apiserver.key'),
    adminCert: join(dir, 'admin.crt'), adminKey: join(dir, 'admin.key'),
    serviceAccountKey, serviceAccountPub,
  };
}

/** A kubeconfig for the admin client certificate against `server` (e.g. https://127.0.0.1:6443). */
export function writeKubeconfig(path: string, server: string, pki: Pki): void {
  writeFileSync(path, [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: sluice-test',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority: ${pki.caCert}`,
    'users:',
    '- name: admin',
    '  user:',
    `    client-certificate: ${pki.adminCert}`,
    `    client-key: ${pki.adminKey}`,
    'contexts:',
    '- name: sluice-test',
    '  context: {cluster: sluice-test, user: admin}',
    'current-context: sluice-test',
    '',
  ].join('\n'), { mode: 0o600 });
}
