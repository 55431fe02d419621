"""The ops page's HTML: Jinja2 templates with autoescaping on, inline CSS, no script.

Every value is escaped by Jinja2 (``autoescape=True``, never ``|safe``; only the constant
stylesheet is ``Markup``, since a ``<style>`` element decodes no entities); a missing
variable is an error (``StrictUndefined``), not an empty string. Links and form actions
are relative (``ops``, ``ops/replay``), so they hold whatever host a proxy serves it on.
"""

from __future__ import annotations

from jinja2 import DictLoader, Environment, StrictUndefined
from markupsafe import Markup

from bot.gateway.ops.view import Page

_CSS = Markup("""
:root{color-scheme:light dark;--bg:#f6f7f9;--card:#fff;--ink:#1d2330;--mute:#667085;
--line:#e3e6eb;--ok:#12805c;--bad:#c0362c;--warn:#b25e09;--acc:#2d5bd7}
@media (prefers-color-scheme:dark){:root{--bg:#12151b;--card:#1b2029;--ink:#e7eaf0;
--mute:#98a2b3;--line:#2c3340;--acc:#7aa2ff}}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
background:var(--bg);color:var(--ink)}
header{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;padding:.75rem 1rem;
background:var(--card);border-bottom:1px solid var(--line)}
header h1{font-size:1.1rem;margin:0}
main{padding:1rem;max-width:1200px;margin:auto}
section{margin-bottom:1.5rem}
h2{font-size:1rem;margin:.25rem 0 .5rem}
h3{font-size:.9rem;margin:.75rem 0 .25rem;font-weight:600}
.mute{color:var(--mute)}.small{font-size:.8rem}
.chips{display:flex;flex-wrap:wrap;gap:.4rem}
.chip{border:1px solid var(--line);border-radius:999px;padding:.1rem .6rem;font-size:.85rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:.5rem .75rem;
margin-bottom:.75rem;overflow-x:auto}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:.8rem;color:var(--mute);font-weight:600}
tr:last-child td{border-bottom:0}
td.num{font-variant-numeric:tabular-nums}
.s-running{color:var(--acc)}.s-queued{color:var(--warn)}.s-success{color:var(--ok)}
.s-error,.s-timeout,.s-unknown{color:var(--bad)}
.nest{display:inline-block;color:var(--mute)}
.dot::before{content:"●";margin-right:.35em}
code{font-size:.85em;word-break:break-all}
button{font:inherit;padding:.35rem .8rem;border-radius:8px;border:1px solid var(--acc);
background:var(--acc);color:#fff;cursor:pointer;min-height:2.2rem}
button.quiet{background:transparent;color:var(--acc)}
.flash{padding:.5rem .75rem;border-radius:8px;background:var(--card);
border:1px solid var(--acc);margin-bottom:1rem}
.error{border-color:var(--bad)}
form.inline{display:inline;margin:0}
input{font:inherit;padding:.45rem;border-radius:8px;border:1px solid var(--line);width:100%;
max-width:24rem;background:var(--card);color:var(--ink)}
@media (max-width:720px){
 table,tbody,tr,td{display:block;width:100%}
 thead{display:none}
 tr{border:1px solid var(--line);border-radius:8px;margin:.5rem 0;padding:.25rem .5rem}
 td{border:0;padding:.15rem 0;display:flex;gap:.5rem}
 td::before{content:attr(data-label);flex:0 0 6.5rem;color:var(--mute);font-size:.8rem}
 tr.depth-1{margin-left:1rem}tr.depth-2{margin-left:2rem}tr.depth-3{margin-left:3rem}
}
""")

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
{% block head %}{% endblock %}
<title>{% block title %}fanbot ops{% endblock %}</title>
<style nonce="{{ nonce }}">{{ css }}</style></head>
<body>{% block body %}{% endblock %}</body></html>
"""

_LOGIN = """{% extends "base" %}
{% block title %}fanbot ops: sign in{% endblock %}
{% block body %}<main>
<h1>fanbot ops</h1>
{% if error %}<p class="flash error" role="alert">{{ error }}</p>{% endif %}
<form method="post" action="{{ action }}" class="card">
<p><label for="token">Token (<code>FANBOT_OPS__TOKEN</code>, or the admin token to replay)</label></p>
<p><input id="token" name="token" type="password" autocomplete="current-password" required
 autofocus></p>
<p><button type="submit">Sign in</button></p>
</form></main>{% endblock %}
"""

_ERROR = """{% extends "base" %}
{% block title %}fanbot ops: {{ status }}{% endblock %}
{% block body %}<main><h1>{{ status }}</h1>
<p class="flash error" role="alert" id="denied">{{ reason }}</p>
<p><a href="{{ back }}">Back to the ops page</a></p></main>{% endblock %}
"""

_PAGE = """{% extends "base" %}
{% block head %}{% if refresh %}<meta http-equiv="refresh" content="{{ refresh }}; url=ops">
{% endif %}{% endblock %}
{% block body %}
<header>
<h1>fanbot ops</h1>
<div class="chips">
<span class="chip" id="count-running">running {{ page.running }}</span>
<span class="chip" id="count-queued">queued {{ page.queued }}</span>
<span class="chip">workers {{ page.workers|length }}</span>
<span class="chip" id="count-dead">dead letters {{ page.dead_total }}</span>
</div>
<span class="mute small">{{ role }} · {{ generated }} UTC ·
{% if refresh %}reloads every {{ refresh }}s (<a href="ops?refresh=0">pause</a>)
{% else %}<a href="ops">reload</a>{% endif %}</span>
<form method="post" action="ops/logout" class="inline">
<button class="quiet" type="submit">Sign out</button></form>
</header>
<main>
{% if flash %}<p class="flash" role="status" id="flash">{{ flash }}</p>{% endif %}

<section id="runs"><h2>Runs{% if page.resumed %} <span class="mute small">· ↻ {{ page.resumed }} resumed after a lost worker</span>{% endif %}</h2>
{% if not page.groups %}<p class="mute card">No live or recent runs.</p>{% endif %}
{% for group in page.groups %}
<div class="card thread" data-session="{{ group.session_key }}">
<h3>{{ group.where }} <span class="mute small">· {{ group.live }} live ·
<code>{{ group.session_key }}</code></span></h3>
<table><thead><tr><th>Run</th><th>Status</th><th>Queue</th><th>Age</th><th>Runtime</th>
<th>Model</th><th>Tokens</th><th>Cost</th></tr></thead><tbody>
{% for node in group.nodes %}{{ run_rows(node, 0) }}{% endfor %}
</tbody></table></div>
{% endfor %}
</section>

<section id="queues"><h2>Queues</h2><div class="card"><table>
<thead><tr><th>Queue</th><th>Queued</th><th>Waiting for a slot</th><th>Started</th>
<th>Failed</th></tr></thead><tbody>
{% for q in page.queues %}<tr data-queue="{{ q.name }}">
<td data-label="Queue"><b>{{ q.name }}</b></td>
<td data-label="Queued" class="num">{{ q.queued }}</td>
<td data-label="Waiting" class="num">{{ q.waiting_slot }}</td>
<td data-label="Started" class="num">{{ q.started }}</td>
<td data-label="Failed" class="num">{{ q.failed }}</td></tr>
{% endfor %}</tbody></table></div></section>

<section id="workers"><h2>Workers</h2><div class="card">
{% if not page.workers %}<p class="mute">No RQ worker is registered.</p>{% else %}<table>
<thead><tr><th>Worker</th><th>State</th><th>Queues</th><th>Current job</th>
<th>Heartbeat</th><th>Host</th></tr></thead><tbody>
{% for w in page.workers %}<tr data-worker="{{ w.name }}">
<td data-label="Worker"><code>{{ w.name }}</code></td>
<td data-label="State">{{ w.state }}</td><td data-label="Queues">{{ w.queues }}</td>
<td data-label="Current">{{ w.current }}</td>
<td data-label="Heartbeat">{{ w.heartbeat }}</td>
<td data-label="Host"><code>{{ w.host }}</code></td></tr>
{% endfor %}</tbody></table>{% endif %}</div></section>

<section id="dead-letters"><h2>Dead letters ({{ page.dead_total }})</h2><div class="card">
{% if not page.dead %}<p class="mute">None.</p>{% else %}
{% if csrf %}<form method="post" action="ops/replay" class="inline">
<input type="hidden" name="csrf" value="{{ csrf }}"><input type="hidden" name="entry" value="all">
<button type="submit" id="replay-all">Replay all</button></form>
{% else %}<p class="mute small">Sign in with the admin token
(<code>FANBOT_OPS__ADMIN_TOKEN</code>) to replay.</p>{% endif %}
<table><thead><tr><th>Age</th><th>Kind</th><th>To</th><th>Reason</th><th>Message</th>
<th></th></tr></thead><tbody>
{% for d in page.dead %}<tr data-dead="{{ d.entry_id }}">
<td data-label="Age">{{ d.age }}</td><td data-label="Kind">{{ d.kind }}</td>
<td data-label="To"><div>{{ d.where }}<br><code class="small">{{ d.key }}</code></div></td>
<td data-label="Reason">{{ d.reason }}</td><td data-label="Message">{{ d.preview }}</td>
<td data-label="">{% if csrf and d.replayable %}
<form method="post" action="ops/replay" class="inline">
<input type="hidden" name="csrf" value="{{ csrf }}">
<input type="hidden" name="entry" value="{{ d.entry_id }}">
<button type="submit" class="replay">Replay</button></form>{% endif %}</td></tr>
{% endfor %}</tbody></table>{% endif %}</div></section>
</main>
{% endblock %}
{% macro run_rows(node, depth) %}{% set r = node.row %}
<tr class="run depth-{{ depth }}" data-run="{{ r.run_id }}" data-status="{{ r.status }}">
<td data-label="Run"><div>{% if depth %}<span class="nest">{{ "↳ " * depth }}</span>{% endif %}
{{ r.name }}<br><span class="mute small">{{ r.agent }} · <code>{{ r.run_id[:8] }}</code></span>
</div></td>
<td data-label="Status"><span class="dot s-{{ r.status }}">{{ r.status }}</span>{% if r.resumes %} <span class="resumed" title="resumed after a worker was lost">↻ {{ r.resumes }}×</span>{% endif %}</td>
<td data-label="Queue" class="num queue-pos">{% if r.position %}#{{ r.position }}{% else %}–{% endif %}</td>
<td data-label="Age" class="num">{{ r.age }}</td>
<td data-label="Runtime" class="num">{{ r.runtime }}</td>
<td data-label="Model"><code>{{ r.model }}</code></td>
<td data-label="Tokens" class="num">{{ r.tokens }}</td>
<td data-label="Cost" class="num">{{ r.cost }}</td></tr>
{% for child in node.children %}{{ run_rows(child, depth + 1) }}{% endfor %}
{% endmacro %}
"""

_ENV = Environment(
    loader=DictLoader({"base": _BASE, "login": _LOGIN, "error": _ERROR, "page": _PAGE}),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(
    page: Page,
    *,
    role: str,
    csrf: str,
    generated: str,
    refresh: int,
    flash: str,
    nonce: str,
) -> str:
    """The ops page; ``csrf`` "" renders no replay form (a viewer)."""
    return _ENV.get_template("page").render(
        page=page,
        role=role,
        csrf=csrf,
        generated=generated,
        refresh=refresh,
        flash=flash,
        nonce=nonce,
        css=_CSS,
    )


def render_login(*, error: str, action: str, nonce: str) -> str:
    return _ENV.get_template("login").render(error=error, action=action, nonce=nonce, css=_CSS)


def render_error(*, status: int, reason: str, back: str, nonce: str) -> str:
    return _ENV.get_template("error").render(
        status=status, reason=reason, back=back, nonce=nonce, css=_CSS
    )
