"""The JSON half of scripts/ops-check.sh (Python's standard library only).

  ops-check.py dashboard-rules DASHBOARD
      checks the Grafana dashboard (uid, schemaVersion, the datasource and
      instance variables, every data source the ${datasource} variable) and
      prints its queries as recording rules, for `promtool check rules`.
  ops-check.py prometheus PROMETHEUS_URL INLET_URL DASHBOARD
      sends events to the gateway while Prometheus scrapes it, until the
      recording rules have a rate; then fails if a rule is unhealthy, an
      alert fires, or a dashboard query answers an error.
"""
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def queries(dash):
    """The dashboard's panel queries, as (where, expr)."""
    out = []

    def walk(v, where):
        if isinstance(v, dict):
            ds = v.get("datasource")
            if isinstance(ds, dict) and ds.get("uid") != "${datasource}":
                sys.exit("%s: data source %s, want the ${datasource} variable" % (where, ds))
            if isinstance(v.get("expr"), str):
                out.append((where, v["expr"]))
            for k, e in v.items():
                walk(e, where + "/" + str(v.get("title", k)))
        elif isinstance(v, list):
            for e in v:
                walk(e, where)

    walk(dash["panels"], "panels")
    return out


def concrete(expr, rate_interval):
    """expr with Grafana's variables replaced by values PromQL takes."""
    return expr.replace("$__rate_interval", rate_interval).replace("$instance", ".*")


def dashboard_rules(path):
    d = json.load(open(path))
    for k in ("uid", "title", "schemaVersion", "panels", "templating"):
        if k not in d:
            sys.exit("%s: no %s" % (path, k))
    kinds = {v["name"]: v["type"] for v in d["templating"]["list"]}
    if kinds.get("datasource") != "datasource" or "instance" not in kinds:
        sys.exit("%s: needs a datasource variable and an instance variable, has %s" % (path, kinds))
    qs = queries(d)
    if len(qs) < 20:
        sys.exit("%s: only %d queries" % (path, len(qs)))
    print("groups:\n  - name: dashboard\n    rules:")
    for i, (_, e) in enumerate(qs):
        print("      - record: dashboard:expr_%d:check\n        expr: %s" % (i, json.dumps(concrete(e, "1m"))))


def prometheus(prom, inlet, path):
    def get(p):
        try:
            with urllib.request.urlopen(prom + p, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def query(q):
        return get("/api/v1/query?" + urllib.parse.urlencode({"query": q}))

    def batch():
        req = urllib.request.Request(inlet + "/v1/batch", data=b'[{"event":"ops_check"}]',
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    deadline = time.time() + 60
    while True:
        batch()
        try:
            r = query("instance:inlet_ingest_requests:rate2m > 0")
            if r.get("status") == "success" and r["data"]["result"]:
                break
        except OSError:
            pass  # Prometheus still starting
        if time.time() > deadline:
            sys.exit("no instance:inlet_ingest_requests:rate2m after 60 s: "
                     "does Prometheus scrape the gateway and load the rules?")
        time.sleep(0.3)
    time.sleep(2)  # every rule evaluated again, with data

    bad, n = [], 0
    for g in get("/api/v1/rules")["data"]["groups"]:
        for r in g["rules"]:
            n += 1
            if r.get("health") != "ok":
                bad.append("rule %s: %s %s" % (r["name"], r.get("health"), r.get("lastError", "")))
            if r["type"] == "alerting" and r.get("state") == "firing":
                bad.append("alert %s fires on a healthy gateway" % r["name"])
    if n < 20:
        bad.append("Prometheus loaded %d rules, want the 22 of inlet.rules.yml" % n)
    qs = queries(json.load(open(path)))
    empty = []
    for where, e in qs:
        r = query(concrete(e, "10s"))
        if r.get("status") != "success":
            bad.append("%s: %r: %s" % (where, e, r.get("error")))
        elif not r["data"]["result"]:
            empty.append(e.splitlines()[0][:100])
    print("ops-check.py: %d rules healthy, none firing; %d dashboard queries answered, %d with no data "
          "(errors that did not happen):" % (n, len(qs), len(empty)), file=sys.stderr)
    for e in empty:
        print("  " + e, file=sys.stderr)
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    if sys.argv[1:2] == ["dashboard-rules"] and len(sys.argv) == 3:
        dashboard_rules(sys.argv[2])
    elif sys.argv[1:2] == ["prometheus"] and len(sys.argv) == 5:
        prometheus(*sys.argv[2:])
    else:
        sys.exit(__doc__)
