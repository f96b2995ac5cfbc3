// The live events page: reads /ui/stream (server-sent events) and shows
// events as the gateway acknowledges them, rejections beside them,
// counters and a 60 s rate per event name, and the gateway's state.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var MAX_ROWS = 200; // rows kept per list
  var es = null, paused = false, skipped = 0, nEvents = 0, nRejected = 0;
  var fEvent = $("f-event"), fUser = $("f-user");
  Array.prototype.forEach.call(document.querySelectorAll(".origin"), function (e) { e.textContent = location.origin; });

  function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
  function hhmmss(ms) { var d = new Date(ms); return d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0"); }

  function connect() {
    if (es) es.close();
    var q = new URLSearchParams();
    if (fEvent.value) q.set("event", fEvent.value);
    if (fUser.value) q.set("user", fUser.value);
    es = new EventSource("stream" + (q.toString() ? "?" + q : ""));
    $("conn").textContent = "connecting…";
    es.onopen = function () { $("conn").textContent = "live"; };
    es.onerror = function () { $("conn").textContent = "disconnected; retrying…"; setPill("st-ready", "bad", "no stream"); };
    es.addEventListener("item", function (m) { if (!paused) add(JSON.parse(m.data)); });
    es.addEventListener("skipped", function (m) {
      skipped += JSON.parse(m.data).n;
      var s = $("skipped"); s.hidden = false;
      s.textContent = skipped + " skipped: this page could not keep up, it shows a sample";
    });
    es.addEventListener("stats", function (m) { stats(JSON.parse(m.data)); });
  }

  function add(it) {
    var rej = it.kind === "rejected";
    var list = rej ? $("rejected") : $("events");
    $(rej ? "rejected-empty" : "events-empty").hidden = true;
    var v = it.value, props = v && typeof v === "object" ? v.props : null;
    var li = el("li", "new");
    var row = el("div", "row");
    row.appendChild(el("span", "t", hhmmss(it.at)));
    row.appendChild(el("span", "n", rej ? it.reason || "rejected" : it.name));
    if (!rej) row.appendChild(el("span", "u", (v && v.uid) || (v && v.anon_id ? "anon " + v.anon_id.slice(0, 8) : "")));
    row.appendChild(el("span", "p", rej ? it.error : props ? JSON.stringify(props) : ""));
    li.appendChild(row);
    li.addEventListener("click", function (ev) {
      if (ev.target.closest("pre")) return;
      var open = li.querySelector(".detail");
      if (open) { open.remove(); return; }
      var d = el("div", "detail");
      if (rej) d.appendChild(el("div", "meta", "why: " + it.error));
      if (rej && v == null) d.appendChild(el("div", "meta", "what was sent is not shown (inlet serve --ui-show-rejected-content shows it)"));
      else d.appendChild(el("pre", "", typeof v === "string" ? v : JSON.stringify(v, null, 2)));
      var where = "topic " + it.topic + (it.offset != null ? " · partition " + it.partition + " · offset " + it.offset : "") + " · " + it.delivery;
      if (it.id) where = "id " + it.id + " · " + where;
      d.appendChild(el("div", "meta", where));
      li.appendChild(d);
    });
    list.insertBefore(li, list.firstChild);
    while (list.children.length > MAX_ROWS) list.removeChild(list.lastChild);
    if (rej) $("n-rejected").textContent = ++nRejected; else $("n-events").textContent = ++nEvents;
  }

  function spark(rate, rej) {
    var w = 140, h = 22, max = Math.max.apply(null, rate.concat([1]));
    var pts = rate.map(function (r, i) { return (i * w / (rate.length - 1)).toFixed(1) + "," + (h - 1 - (r / max) * (h - 2)).toFixed(1); });
    var ns = "http://www.w3.org/2000/svg", s = document.createElementNS(ns, "svg");
    s.setAttribute("width", w); s.setAttribute("height", h);
    var p = document.createElementNS(ns, "polyline");
    p.setAttribute("points", pts.join(" ")); p.setAttribute("fill", "none");
    p.setAttribute("stroke", rej ? "#f85149" : "#58a6ff"); p.setAttribute("stroke-width", "1.5");
    s.appendChild(p);
    return s;
  }

  function setPill(id, cls, text) { var p = $(id); p.className = "pill " + cls; p.textContent = text; p.hidden = false; }

  function stats(st) {
    $("try-example").hidden = !st.example; // /example/ is served with serve --example only
    $("send-auth").hidden = !st.auth; // with --auth, ingest needs a client's credentials
    var s = st.state;
    if (s) {
      setPill("st-ready", s.ready ? "ok" : "bad", s.ready ? "ready" : "not ready: " + (s.error || ""));
      setPill("st-ack", "", "ack " + s.ack);
      setPill("st-kafka", s.kafka === "ok" ? "ok" : "bad", s.kafka === "ok" ? "kafka ok" : "kafka: " + s.kafka.slice(0, 60));
      if (s.spool) {
        var b = s.spool.unforwarded_records;
        setPill("st-spool", b > 1000 ? "warn" : "ok", "spool backlog " + b + " · " + (100 * s.spool.bytes / s.spool.max_bytes).toFixed(1) + "% full");
      }
    }
    var box = $("counters"), names = st.names.slice().sort(function (a, b) { return b.total - a.total; });
    if (!names.length) return;
    box.textContent = "";
    var dl = $("names"); dl.textContent = "";
    names.forEach(function (n) {
      var c = el("div", "ctr" + (n.rejected ? " rej" : "") + (fEvent.value === n.name ? " sel" : ""));
      var last = n.rate.slice(-10).reduce(function (a, b) { return a + b; }, 0) / 10;
      c.title = n.name + ": " + n.total + " since " + new Date(st.since).toLocaleTimeString() + ", " + last.toFixed(1) + "/s over the last 10 s";
      var head = el("div", "head");
      head.appendChild(el("span", "name", n.name));
      head.appendChild(el("span", "total", n.total));
      c.appendChild(head);
      c.appendChild(spark(n.rate, n.rejected));
      if (!n.rejected) c.addEventListener("click", function () { fEvent.value = fEvent.value === n.name ? "" : n.name; connect(); });
      box.appendChild(c);
      if (!n.rejected) { var o = el("option"); o.value = n.name; dl.appendChild(o); }
    });
  }

  var debounce;
  [fEvent, fUser].forEach(function (i) { i.addEventListener("input", function () { clearTimeout(debounce); debounce = setTimeout(connect, 300); }); });
  $("pause").addEventListener("click", function () { paused = !paused; this.textContent = paused ? "Resume" : "Pause"; });
  $("clear").addEventListener("click", function () {
    $("events").textContent = ""; $("rejected").textContent = ""; nEvents = nRejected = skipped = 0;
    $("n-events").textContent = $("n-rejected").textContent = "0"; $("skipped").hidden = true;
  });
  connect();
})();
