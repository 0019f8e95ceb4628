export {
  AgentqClient,
  JobHandle,
  FINAL_STATUSES,
  type ClientOptions,
  type SubmitOptions,
  type ResultOptions,
  type Job,
  type JobRecord,
  type JobStatus,
  type Call,
  type History,
  type Tenant,
  type SignalSent,
  type EventSent,
  type ListJobsQuery,
} from "./client.js";
export {
  type Message, type JobOptions, type ToolSpec, type ForkChanges, type LinkedJob, type Thread, type Forks, type JobDiff,
} from "./continuation.js";
export { followEvents, type Event, type JobEvent, type EventsOptions, type OpenStream } from "./events.js";
export {
  AgentqError,
  MalformedRequest,
  Unauthorized,
  Forbidden,
  NotFound,
  Conflict,
  JobExpired,
  PayloadTooLarge,
  InvalidRequest,
  JobValidationError,
  RetryableError,
  RateLimited,
  StoreUnavailable,
  ServerError,
  JobTimeoutError,
  errorFromResponse,
  parseRetryAfter,
  type Problem,
  type ErrorBody,
} from "./errors.js";
export type { paths, components, operations } from "./schema.js";
