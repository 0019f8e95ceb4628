/**
 * The types of resume, continue, fork, threads and compare (`handle.resume()`, `handle.continue()`,
 * `handle.fork()`, `client.thread()`, `client.forks()`, `client.diff()`). The API reads these request bodies as
 * plain JSON and checks them whole (a bad one is a 422 naming every problem by JSON pointer), so they are typed here.
 */
import type { components } from "./schema.js";

type Schemas = components["schemas"];

/** One message of a job's `context` (`{"type": "text", "text": ...}`, `{"type": "data", ...}`). */
export type Message = Record<string, unknown>;

/** Job options, laid over the job's own: `budget`, `max_ticks`, `model`, `deadline_s`, `ttl_s`, ... */
export type JobOptions = NonNullable<Schemas["Job"]["options"]> & Record<string, unknown>;

/** A tool of a job: a registered tool's name, or its schema. */
export type ToolSpec = string | Record<string, unknown>;

/** What a fork changes: options over the old job's, its tools and its first messages instead of the old job's. */
export interface ForkChanges {
  options?: JobOptions;
  tools?: ToolSpec[];
  context?: Message[];
}

/** One job of a thread or of a job's forks: its id, the messages it added, its record. */
export interface LinkedJob {
  id: string;
  kind?: string;
  messages: Message[];
  record: Schemas["JobRecord"] & Record<string, unknown>;
}

/** `client.thread(id)`: the first job of a conversation, then each continuation, in order. */
export interface Thread {
  thread: string;
  jobs: LinkedJob[];
}

/** `handle.forks()`: a job's forks, oldest first. */
export interface Forks {
  job: string;
  forks: LinkedJob[];
}

/** `client.diff(a, b)`: two jobs compared side by side (`same`: the same outcome; cost and durations compared). */
export type JobDiff = Schemas["JobDiff"];

/** The body of a continue or fork request: only the fields given. */
export function bodyOf(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));
}
