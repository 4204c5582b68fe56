// Kubernetes `Status` objects and the error type that carries one. Every
// failure the server returns is a Status with the HTTP code in `code`, as the
// real API server does, so client-node raises ApiException with that code.

export type StatusReason =
  | 'NotFound'
  | 'AlreadyExists'
  | 'Conflict'
  | 'Invalid'
  | 'BadRequest'
  | 'Expired'
  | 'Gone'
  | 'MethodNotAllowed'
  | 'UnsupportedMediaType'
  | 'RequestEntityTooLarge'
  | 'Timeout'
  | 'InternalError';

export interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  uid?: string;
  causes?: { reason?: string; message: string; field?: string }[];
}

export interface Status {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: StatusReason;
  details?: StatusDetails;
  code: number;
}

export class ApiError extends Error {
  readonly code: number;
  readonly reason: StatusReason;
  readonly details: StatusDetails | undefined;

  constructor(code: number, reason: StatusReason, message: string, details?: StatusDetails) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
    this.details = details;
  }

  toStatus(): Status {
    const status: Status = {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      code: this.code,
    };
    if (this.details) status.details = this.details;
    return status;
  }
}

export function successStatus(details: StatusDetails): Status {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details, code: 200 };
}

/** The messages below follow the real API server's wording, so logs read the same. */
export const errors = {
  notFound(resource: string, name: string): ApiError {
    return new ApiError(404, 'NotFound', `${resource} "${name}" not found`, { name, kind: resource });
  },
  alreadyExists(resource: string, name: string): ApiError {
    return new ApiError(409, 'AlreadyExists', `${resource} "${name}" already exists`, { name, kind: resource });
  },
  conflict(resource: string, name: string, why: string): ApiError {
    return new ApiError(
      409,
      'Conflict',
      `Operation cannot be fulfilled on ${resource} "${name}": ${why}`,
      { name, kind: resource },
    );
  },
  invalid(kind: string, name: string, causes: { field: string; message: string }[]): ApiError {
    const summary = causes.map((c) => `${c.field}: ${c.message}`).join(', ');
    return new ApiError(422, 'Invalid', `${kind} "${name}" is invalid: ${summary}`, {
      name,
      kind,
      causes: causes.map((c) => ({ reason: 'FieldValueInvalid', message: c.message, field: c.field })),
    });
  },
  badRequest(message: string): ApiError {
    return new ApiError(400, 'BadRequest', message);
  },
  expired(message: string): ApiError {
    return new ApiError(410, 'Expired', message);
  },
  methodNotAllowed(method: string, path: string): ApiError {
    return new ApiError(405, 'MethodNotAllowed', `the server does not allow method ${method} on ${path}`);
  },
  unsupportedMediaType(contentType: string): ApiError {
    return new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format: ${contentType}`);
  },
};
