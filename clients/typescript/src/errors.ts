/**
 * The errors the client throws. Every answer of the API that is not a success carries
 * `{"error": {"type", "message", "problems": [{"pointer", "message"}]}}`; `errorFromResponse` turns it into
 * one of these classes, chosen by the HTTP status (and, for a 422, by the error's type).
 */
import type { components } from "./schema.js";

export type Problem = components["schemas"]["Problem"];
export type ErrorBody = components["schemas"]["Error"];

/** The base of every error of agentq's API: its HTTP status, the error's type and every problem. */
export class AgentqError extends Error {
  override name = "AgentqError";
  readonly status: number;
  readonly type: string;
  readonly problems: Problem[];

  constructor(status: number, type: string, message: string, problems: Problem[] = []) {
    super(message);
    this.status = status;
    this.type = type;
    this.problems = problems;
  }
}

/** 400: the body was not UTF-8 JSON. */
export class MalformedRequest extends AgentqError {
  override name = "MalformedRequest";
}

/** 401: no token, or one the API does not know. */
export class Unauthorized extends AgentqError {
  override name = "Unauthorized";
}

/** 403: the token may not do this (a read-only token's change, another tenant's settings). */
export class Forbidden extends AgentqError {
  override name = "Forbidden";
}

/** 404: no such job or call (or one another tenant's token may not see). */
export class NotFound extends AgentqError {
  override name = "NotFound";
}

/** 409: the job or call is not in a state that allows this (approving a call that is not held, ...). */
export class Conflict extends AgentqError {
  override name = "Conflict";
}

/** 410: the job was submitted, but its data expired with its `ttl_s`. */
export class JobExpired extends NotFound {
  override name = "JobExpired";
}

/** 413: the body is over the API's limit (AGENTQ_MAX_JOB_BYTES). */
export class PayloadTooLarge extends AgentqError {
  override name = "PayloadTooLarge";
}

/** 422: the request is not valid; `problems` names each problem by JSON pointer. */
export class InvalidRequest extends AgentqError {
  override name = "InvalidRequest";
}

/** 422 for a job: nothing was written; `problems` names every problem of the job by JSON pointer. */
export class JobValidationError extends InvalidRequest {
  override name = "JobValidationError";
}

/** An error whose answer said when to try again (`Retry-After`, in seconds). */
export class RetryableError extends AgentqError {
  readonly retryAfter: number | undefined;

  constructor(status: number, type: string, message: string, problems: Problem[], retryAfter: number | undefined) {
    super(status, type, message, problems);
    this.retryAfter = retryAfter;
  }
}

/** 429: a tenant's limit refused the job; nothing was written. Submit again after `retryAfter` seconds. */
export class RateLimited extends RetryableError {
  override name = "RateLimited";
}

/** 503: the API cannot reach its state store; try again after `retryAfter` seconds. */
export class StoreUnavailable extends RetryableError {
  override name = "StoreUnavailable";
}

/** 5xx: a failure of the server's own. */
export class ServerError extends AgentqError {
  override name = "ServerError";
}

/** `handle.result({timeoutMs})`: the job did not end within the time allowed (the job goes on). */
export class JobTimeoutError extends Error {
  override name = "JobTimeoutError";
  readonly jobId: string;

  constructor(jobId: string, timeoutMs: number) {
    super(`job ${jobId} did not end within ${timeoutMs} ms`);
    this.jobId = jobId;
  }
}

const BY_STATUS: Record<number, new (status: number, type: string, message: string, problems: Problem[]) => AgentqError> = {
  400: MalformedRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  410: JobExpired,
  413: PayloadTooLarge,
};

/** The error an answer stands for (its body read here when `body` is not given). */
export async function errorFromResponse(response: Response, body?: unknown): Promise<AgentqError> {
  const parsed = body === undefined ? await readJson(response) : body;
  const info = isErrorBody(parsed) ? parsed.error : undefined;
  const type = info?.type ?? `HTTP${response.status}`;
  const message = info?.message ?? `${response.status} ${response.statusText}`.trim();
  const problems = info?.problems ?? [];
  const status = response.status;
  if (status === 429 || status === 503) {
    const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
    return new (status === 429 ? RateLimited : StoreUnavailable)(status, type, message, problems, retryAfter);
  }
  if (status === 422) {
    return new (type === "JobValidationError" ? JobValidationError : InvalidRequest)(status, type, message, problems);
  }
  const known = BY_STATUS[status];
  if (known !== undefined) return new known(status, type, message, problems);
  return status >= 500 ? new ServerError(status, type, message, problems) : new AgentqError(status, type, message, problems);
}

function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== "object" || value === null) return false;
  const error = (value as { error?: unknown }).error;
  return typeof error === "object" && error !== null && typeof (error as { type?: unknown }).type === "string";
}

async function readJson(response: Response): Promise<unknown> {
  try {
    return await response.json();
  } catch {
    return undefined;
  }
}

/** Seconds from a `Retry-After` header: a number of seconds or an HTTP date. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}
