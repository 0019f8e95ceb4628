import sys, os, subprocess, time
sys.path.insert(0, "/work/wt-engine")
from pathlib import Path
from benchmarks.engine import *
mode = sys.argv[1]
with RedisServer() as redis, FakeAnthropic() as fake:
    d = Dispatcher(redis.url, fake, [], Path("/tmp/eng/d.log"))
    client = Client(settings=Settings(redis_url=redis.url))
    wait_live(client, d)
    overhead(redis.url, fake, d, 3)
    spy = subprocess.Popen(["/work/main/.venv/bin/py-spy", "record", "--pid", str(d.popen.pid), "--rate", "250", "--format", "raw", "--output", f"/tmp/eng/spy-{mode}.txt", "--gil", "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    if mode == "ticks":
        print(overhead(redis.url, fake, d, int(sys.argv[2])))
    else:
        print(held(redis.url, fake, d, int(sys.argv[2]), 2.0, 10))
    spy.send_signal(2); spy.wait(30)
    client.close(); d.stop()
