// A TCP proxy in front of the API that drops the first event stream's connection in the middle of a message,
// after it forwarded `afterEvents` complete events: what a load balancer's idle cut or a flaky network does.
import { connect, createServer } from "node:net";

export async function startDroppingProxy(target, { afterEvents }) {
  const { hostname, port } = new URL(target);
  const state = { drops: 0, lastEventIds: [], armed: true };
  const server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    let request = "";
    let streaming = false;
    let seen = 0;
    client.on("data", (chunk) => {
      request += chunk.toString("latin1");
      for (const match of chunk.toString("latin1").matchAll(/^last-event-id:\s*(\S+)/gim)) state.lastEventIds.push(match[1]);
      streaming ||= state.armed && /^GET \S*\/events/m.test(request);
      if (streaming) state.armed = false; // only the first stream is cut
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (!streaming) return void client.write(chunk);
      const text = chunk.toString("latin1");
      let at = -1;
      for (const match of text.matchAll(/(^|\n)id:/g)) {
        seen += 1;
        if (seen > afterEvents) {
          at = match.index + match[1].length;
          break;
        }
      }
      if (seen <= afterEvents) return void client.write(chunk);
      client.write(chunk.subarray(0, at + 6)); // into the next message: its id line, cut short
      state.drops += 1;
      streaming = false;
      client.destroy();
      upstream.destroy();
    });
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    state,
    close: () => new Promise((resolve) => { server.close(resolve); }),
  };
}
