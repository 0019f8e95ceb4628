/**
 * A job's events as an async iterator over the API's server-sent events, resumed after a dropped connection:
 * each reconnect sends `Last-Event-ID` (the id of the last event handed out), so the API sends exactly the events
 * after it, none lost or repeated. A message cut off by the drop was never complete, so it is never handed out;
 * it comes again after the reconnect. The stream ends after the job's last `job.finished` (or on the API's 204:
 * nothing follows): a resumed job's stream goes on past the `job.finished` of each earlier run, which `job.resumed`
 * follows, to the end of its last run.
 */
import { createParser } from "eventsource-parser";
import { AgentqError, errorFromResponse } from "./errors.js";
import type { components } from "./schema.js";

/** One event envelope (`job.queued`, `call.started`, `call.awaiting_approval`, `job.finished`, ...). */
export type Event = components["schemas"]["Event"];

/** An event with its stream id (what `after` and `Last-Event-ID` take). */
export interface JobEvent {
  id: string;
  event: string;
  data: Event;
}

export interface EventsOptions {
  /** Start after this event id (default: from the job's first event). */
  after?: string;
  /** Stop following (the iterator then throws the signal's reason). */
  signal?: AbortSignal;
  /** Reconnects in a row without an event in between before the iterator gives up (default 10). */
  maxReconnects?: number;
  /** Wait before a reconnect, until the API's `retry:` hint says otherwise (default 1000 ms). */
  reconnectDelayMs?: number;
}

/** Opens the stream: `lastEventId` is the id to resume after (undefined: from `after`, or the start). */
export type OpenStream = (lastEventId: string | undefined, signal: AbortSignal | undefined) => Promise<Response>;

export async function* followEvents(open: OpenStream, options: EventsOptions = {}): AsyncGenerator<JobEvent> {
  const { signal } = options;
  const maxReconnects = options.maxReconnects ?? 10;
  let delayMs = options.reconnectDelayMs ?? 1000;
  let lastId = options.after;
  let failures = 0;
  let finished = false; // the last event handed out was a `job.finished`
  for (;;) {
    signal?.throwIfAborted();
    let response: Response | undefined;
    let dropped: unknown;
    try {
      response = await open(lastId, signal);
    } catch (error) {
      dropped = error;
    }
    if (response !== undefined) {
      if (response.status === 204) return; // resumed after the final event: nothing follows
      if (!response.ok && response.status !== 503) throw await errorFromResponse(response);
    }
    if (response?.ok && response.body) {
      const queue: JobEvent[] = [];
      const parser = createParser({
        onEvent(message) {
          if (message.id === undefined || message.data === "") return;
          const data = JSON.parse(message.data) as Event;
          queue.push({ id: message.id, event: message.event ?? data.event, data });
        },
        onRetry(ms) {
          delayMs = ms;
        },
      });
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) {
            if (finished) return; // the API ends the stream after the job's last `job.finished`
            break;
          }
          parser.feed(value);
          for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
            lastId = next.id;
            failures = 0;
            finished = next.event === "job.finished";
            yield next;
          }
        }
      } catch (error) {
        dropped = error; // the connection broke mid-stream: resume from lastId
      } finally {
        reader.cancel().catch(() => undefined);
      }
    } else if (response !== undefined) {
      await response.body?.cancel().catch(() => undefined);
    }
    signal?.throwIfAborted();
    failures += 1;
    if (failures > maxReconnects) {
      if (dropped !== undefined) throw dropped;
      throw new AgentqError(0, "StreamEnded", `the event stream ended ${failures} times in a row without an event`);
    }
    await sleep(delayMs, signal);
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }
    function aborted(): void {
      clearTimeout(timer);
      reject(signal?.reason);
    }
    signal?.addEventListener("abort", aborted, { once: true });
  });
}
