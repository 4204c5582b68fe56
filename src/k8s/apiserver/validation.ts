// Field checks shared by the strict validators. Each returns a message, or
// undefined when the value is fine, so validators can collect every cause.

import { isIPv4, isIPv6 } from 'node:net';
import { parseCidr } from './ip';

export interface FieldError {
  field: string;
  message: string;
}

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const IANA_SVC_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;

export const PROTOCOLS = ['TCP', 'UDP', 'SCTP'];

export function dns1123Label(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 63 || !DNS1123_LABEL.test(value)) {
    return `must be a lowercase RFC 1123 label of at most 63 characters, got ${JSON.stringify(value)}`;
  }
  return undefined;
}

export function dns1035Label(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 63 || !DNS1035_LABEL.test(value)) {
    return `must be a lowercase RFC 1035 label (start with a letter) of at most 63 characters, got ${JSON.stringify(value)}`;
  }
  return undefined;
}

export function dns1123Subdomain(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 253 || !DNS1123_SUBDOMAIN.test(value)) {
    return `must be a lowercase RFC 1123 subdomain of at most 253 characters, got ${JSON.stringify(value)}`;
  }
  return undefined;
}

export function portNumber(value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 65535) {
    return `must be between 1 and 65535, inclusive, got ${JSON.stringify(value)}`;
  }
  return undefined;
}

export function portName(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 15 || !IANA_SVC_NAME.test(value) || !/[a-z]/.test(value) || value.includes('--')) {
    return `must be an IANA service name (at most 15 lowercase letters, digits and single hyphens, with a letter), got ${JSON.stringify(value)}`;
  }
  return undefined;
}

export function protocol(value: unknown): string | undefined {
  return PROTOCOLS.includes(value as string) ? undefined : `supported values: "TCP", "UDP", "SCTP", got ${JSON.stringify(value)}`;
}

export function ipAddress(value: unknown, family?: 'IPv4' | 'IPv6'): string | undefined {
  const ok = typeof value === 'string' && (family === 'IPv4' ? isIPv4(value) : family === 'IPv6' ? isIPv6(value) : isIPv4(value) || isIPv6(value));
  return ok ? undefined : `must be a valid ${family ?? 'IP'} address, got ${JSON.stringify(value)}`;
}

export function cidr(value: unknown): string | undefined {
  try {
    parseCidr(String(value));
    return undefined;
  } catch {
    return `must be a valid CIDR, got ${JSON.stringify(value)}`;
  }
}

export function oneOf(value: unknown, allowed: string[]): string | undefined {
  return allowed.includes(value as string) ? undefined : `supported values: ${allowed.map((a) => `"${a}"`).join(', ')}, got ${JSON.stringify(value)}`;
}

/** Collects field errors: `check(field, message | undefined)`. */
export class FieldErrors {
  readonly list: FieldError[] = [];
  check(field: string, message: string | undefined): void {
    if (message !== undefined) this.list.push({ field, message });
  }
}
