// toolgate reviewer console: plain JavaScript, no framework, nothing loaded from elsewhere.
// Every value from the server is shown with textContent (never parsed as HTML): proposal
// arguments come from a model and are untrusted.
"use strict";

(function () {
  // an older console kept the token in sessionStorage, readable by any script on this origin and
  // left behind in the tab after it closed; it is removed at load and never written again
  var LEGACY_TOKEN_KEY = "toolgate.token";
  var POLL_MS = 1500;
  var MAX_POLLS = 80;
  var FINAL = ["succeeded", "failed", "rejected", "expired", "dead_lettered", "unknown"];
  var HINTS = {
    self_approval: "You requested this operation; another person must review it.",
    editor_approval: "You edited this proposal; another person must approve it.",
    already_decided: "You already decided this proposal; a second decision by the same person does not count.",
    digest_mismatch: "The proposal changed since you opened it. Reload it and review again.",
    expired: "The proposal expired; the requester must ask again.",
    not_pending: "This proposal is no longer waiting for a decision.",
    missing_role: "Your roles do not allow you to decide this proposal.",
    cross_tenant: "This proposal belongs to another organization.",
    not_found: "No such proposal is visible to you.",
    reason_required: "A rejection needs a reason the requester can read.",
    revoked: "Your access has been revoked.",
    authentication_failed: "The token was not accepted.",
    missing_token: "Sign in with your access token."
  };

  var timers = { countdown: null, poll: null };
  var current = null; // the proposal on screen
  // the reviewer's token lives only in this closure: a reload or a new tab signs in again
  var sessionToken = null;

  function $(id) { return document.getElementById(id); }

  function show(id, visible) { $(id).hidden = !visible; }

  function setText(id, value) {
    $(id).textContent = value === null || value === undefined || value === "" ? "—" : String(value);
  }

  function say(message) {
    $("status").textContent = message;
  }

  function clearAlert() {
    show("alert", false);
    $("alert-code").textContent = "";
    $("alert-message").textContent = "";
  }

  function alertError(err) {
    var code = err.code || "error";
    var hint = HINTS[code] ? " " + HINTS[code] : "";
    $("alert-code").textContent = code + ":";
    var message = err.message || "request failed";
    $("alert-message").textContent = " " + message + (/[.!?]$/.test(message) ? "" : ".") + hint;
    show("alert", true);
  }

  function ApiError(status, code, message, body) {
    this.status = status;
    this.code = code;
    this.message = message;
    this.body = body || {};
  }

  function token() { return sessionToken; }

  function api(path, options) {
    options = options || {};
    var headers = { "Accept": "application/json", "Authorization": "Bearer " + (token() || "") };
    var init = { method: options.method || "GET", headers: headers, cache: "no-store", credentials: "omit" };
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    // relative to the page (…/console), so the API is found under any mount prefix
    return window.fetch(path, init).then(function (response) {
      return response.text().then(function (text) {
        var body = {};
        try { body = text ? JSON.parse(text) : {}; } catch (e) { body = {}; }
        if (!response.ok) {
          var err = new ApiError(response.status, body.error || "http_" + response.status,
            body.message || response.statusText, body);
          if (response.status === 401) { signOut(); }
          throw err;
        }
        return body;
      });
    }, function () {
      throw new ApiError(0, "network_error", "the server could not be reached");
    });
  }

  function stopTimers() {
    if (timers.countdown) { window.clearInterval(timers.countdown); timers.countdown = null; }
    if (timers.poll) { window.clearTimeout(timers.poll); timers.poll = null; }
  }

  function duration(seconds) {
    if (seconds <= 0) { return "expired"; }
    var m = Math.floor(seconds / 60);
    var s = seconds % 60;
    return (m ? m + " min " : "") + (s < 10 && m ? "0" : "") + s + " s";
  }

  // ---- session -------------------------------------------------------------------------

  function signOut() {
    sessionToken = null;
    stopTimers();
    current = null;
    show("session", false);
    show("queue", false);
    show("detail", false);
    show("operation", false);
    show("signin", true);
    $("whoami").textContent = "";
    $("proposal-rows").textContent = "";
  }

  function start() {
    return api("toolgate/me").then(function (me) {
      $("whoami").textContent = "Signed in as " + me.user_id + " (" + me.tenant + "; roles: " +
        (me.roles.length ? me.roles.join(", ") : "none") + ")";
      show("signin", false);
      show("session", true);
      var key = requestedTrace();
      return loadList().then(function () { return key ? auditTrace(key) : null; });
    });
  }

  function onSignIn(event) {
    event.preventDefault();
    clearAlert();
    var value = $("token-input").value.trim();
    if (!value) { return; }
    sessionToken = value;
    $("token-input").value = "";
    start().then(function () {
      say("Signed in.");
      $("refresh").focus();
    }, function (err) {
      alertError(err);
      $("token-input").focus();
    });
  }

  // ---- the list ------------------------------------------------------------------------

  // label: the column's name, shown beside the value when a narrow screen stacks the row
  function cell(row, text, label) {
    var td = document.createElement("td");
    td.textContent = text;
    if (label) { td.setAttribute("data-label", label); }
    row.appendChild(td);
    return td;
  }

  // ids, hashes and keys: the only text allowed to wrap anywhere (ordinary words never break)
  // keep: a short token (a time, a release, a revision) kept on one line where the table has room
  function codeCell(row, text, label, keep) {
    var code = document.createElement("code");
    code.textContent = text;
    var td = cell(row, "", label);
    if (keep) { td.className = "keep"; }
    td.appendChild(code);
    return td;
  }

  function loadList() {
    stopTimers();
    current = null;
    show("detail", false);
    show("operation", false);
    show("queue", true);
    return api("toolgate/proposals?status=pending_approval").then(function (data) {
      var rows = $("proposal-rows");
      rows.textContent = "";
      data.proposals.forEach(function (p) {
        var tr = document.createElement("tr");
        tr.setAttribute("data-testid", "row-" + p.proposal_id);
        codeCell(tr, p.proposal_id, "Proposal");
        cell(tr, p.tool, "Tool");
        cell(tr, p.risk, "Risk");
        cell(tr, p.requester, "Requester");
        cell(tr, duration(p.seconds_left), "Time left");
        var button = document.createElement("button");
        button.type = "button";
        button.textContent = "Open";
        button.setAttribute("aria-label", "Open proposal " + p.proposal_id + " (" + p.tool + ")");
        button.setAttribute("data-testid", "open-" + p.proposal_id);
        button.addEventListener("click", function () { openProposal(p.proposal_id); });
        cell(tr, "").appendChild(button);
        rows.appendChild(tr);
      });
      show("queue-empty", data.proposals.length === 0);
      show("proposal-table", data.proposals.length > 0);
      say(data.proposals.length + " proposal(s) waiting for review.");
    }, alertError);
  }

  // ---- one proposal --------------------------------------------------------------------

  function renderDecisions(decisions) {
    var list = $("decisions");
    list.textContent = "";
    decisions.forEach(function (d) {
      var li = document.createElement("li");
      li.textContent = d.reviewer + ": " + d.decision + (d.reason ? " (" + d.reason + ")" : "") +
        (d.authentic ? "" : " — NOT AUTHENTIC, does not count") +
        (d.digest_bound ? "" : " — bound to another digest, does not count");
      list.appendChild(li);
    });
    show("decisions-empty", decisions.length === 0);
  }

  function factLabel(key) {
    var text = key.replace(/_cents$/, "").replace(/_/g, " ");
    return text.charAt(0).toUpperCase() + text.slice(1);
  }

  // an amount in cents reads as money, with the exact cents beside it
  function factValue(key, value, facts) {
    if (/_cents$/.test(key) && typeof value === "number" && Math.floor(value) === value) {
      var money = (value < 0 ? "-" : "") + (Math.abs(value) / 100).toFixed(2);
      var currency = typeof facts.currency === "string" ? " " + facts.currency : "";
      return money + currency + " (" + value + " cents)";
    }
    if (value === null || value === undefined) { return "—"; }
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function renderReviewDetails(p) {
    var list = $("review-details");
    list.textContent = "";
    var facts = p.review_details || {};
    Object.keys(facts).forEach(function (key) {
      var dt = document.createElement("dt");
      dt.textContent = factLabel(key);
      var dd = document.createElement("dd");
      dd.setAttribute("data-testid", "detail-" + key);
      dd.textContent = factValue(key, facts[key], facts);
      if (/_cents$/.test(key) && typeof facts[key] === "number" && facts[key] < 0) {
        dd.textContent += " — more than remains";
        dd.className = "negative";
      }
      list.appendChild(dt);
      list.appendChild(dd);
    });
    show("review-details", Object.keys(facts).length > 0);
    show("review-details-none", p.review_details !== null && Object.keys(facts).length === 0);
    $("review-details-error").textContent = p.review_details_error
      ? p.review_details_error + " Do not approve without them." : "";
    show("review-details-error", !!p.review_details_error);
  }

  var WARNING_LABELS = {
    semantic_check: "Would fail at execution:",
    check_unavailable: "Not checked:",
    same_resource: "Same resource:",
    exceeds_remaining: "Together too much:"
  };

  function renderWarnings(warnings) {
    var list = $("warning-list");
    list.textContent = "";
    warnings.forEach(function (w, i) {
      var li = document.createElement("li");
      li.setAttribute("data-testid", "warning-" + w.kind);
      var label = document.createElement("strong");
      label.textContent = (WARNING_LABELS[w.kind] || "Warning:") + " ";
      li.appendChild(label);
      li.appendChild(document.createTextNode(w.message));
      list.appendChild(li);
    });
    show("warnings", warnings.length > 0);
  }

  function renderWords(p) {
    $("requester-text").textContent = p.requester_text || "";
    $("requester-caption").textContent = "— " + p.requester + ", in their own words (redacted; not checked by toolgate)";
    show("requester-words", !!p.requester_text);
  }

  function summarize(args) {
    var text = JSON.stringify(args);
    return text.length > 160 ? text.slice(0, 159) + "…" : text;
  }

  function renderRelated(p) {
    var rows = $("related-rows");
    rows.textContent = "";
    p.related.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-testid", "related-" + r.proposal_id);
      var td = cell(tr, "", "Proposal");
      var button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      var code = document.createElement("code");
      code.textContent = r.proposal_id;
      button.appendChild(code);
      button.setAttribute("aria-label", "Open related proposal " + r.proposal_id + " (" + r.status + ")");
      button.addEventListener("click", function () { openProposal(r.proposal_id); });
      td.appendChild(button);
      cell(tr, r.status + (r.authentic ? "" : " (NOT AUTHENTIC)"), "Status");
      cell(tr, r.requester, "Requester");
      codeCell(tr, summarize(r.arguments), "Arguments");
      codeCell(tr, r.created_at, "Created", true);
      rows.appendChild(tr);
    });
    var more = p.related_total > p.related.length ? " (" + p.related_total + " in all; newest shown)" : "";
    $("related-title").textContent = "Other proposals for the same resource" + more;
    show("related-empty", p.related.length === 0);
    show("related-table", p.related.length > 0);
  }

  function startCountdown(seconds) {
    var deadline = window.performance.now() + seconds * 1000; // the server's clock, not this browser's
    var warned = false;
    function tick() {
      var left = Math.max(0, Math.round((deadline - window.performance.now()) / 1000));
      $("countdown").textContent = left > 0 ? "Expires in " + duration(left) : "Expired: it can no longer be approved.";
      if (left <= 60 && left > 0 && !warned) { warned = true; say("This proposal expires in less than a minute."); }
      if (left === 0) {
        setActionsEnabled(false);
        window.clearInterval(timers.countdown);
        timers.countdown = null;
        say("The proposal expired.");
      }
    }
    tick();
    timers.countdown = window.setInterval(tick, 1000);
  }

  function setActionsEnabled(enabled) {
    ["approve", "reject", "reject-reason", "confirm-reviewed", "edit", "edit-arguments"].forEach(function (id) { $(id).disabled = !enabled; });
  }

  // keepAlert: a reload after a decision keeps its message (refusal or status) on screen;
  // notice: what led here (an edit), shown above the proposal
  function openProposal(id, keepAlert, notice) {
    if (!keepAlert) { clearAlert(); }
    stopTimers();
    return api("toolgate/proposals/" + encodeURIComponent(id)).then(function (p) {
      current = p;
      var title = $("detail-title");
      title.textContent = "Proposal ";
      var idSpan = document.createElement("span");
      idSpan.className = "id";
      idSpan.textContent = p.proposal_id;
      title.appendChild(idSpan);
      setText("fact-tool", p.tool);
      setText("fact-tool-version", p.tool_version);
      setText("fact-handler", p.handler_revision);
      setText("fact-release", p.release);
      setText("fact-risk", p.risk);
      setText("fact-effect", p.effect);
      setText("fact-rollback", p.rollback);
      setText("fact-timeout", p.timeout_s === null ? "(unknown: another release)" : p.timeout_s + " s per attempt");
      setText("fact-approval", p.escalation ? p.approval_class + " (raised: " + p.escalation.reason + ")" : p.approval_class);
      setText("fact-requester", p.requester);
      setText("fact-created", p.created_at);
      setText("fact-expires", p.expires_at);
      setText("fact-status", p.status);
      setText("fact-args-sha", p.arguments_sha256);
      setText("digest", p.digest);
      $("arguments").textContent = JSON.stringify(p.arguments, null, 2);
      renderReviewDetails(p);
      renderWarnings(p.warnings || []);
      renderWords(p);
      renderRelated(p);
      $("edit-arguments").value = JSON.stringify(p.arguments, null, 2);
      $("edit-result").textContent = notice || "";
      show("edit-result", !!notice);
      $("superseded").textContent = p.superseded_by ? "A reviewer edited this proposal; it was replaced by " + p.superseded_by + "." : "";
      show("superseded", !!p.superseded_by);
      renderDecisions(p.decisions);
      $("confirm-reviewed").checked = false;
      $("reject-reason").value = "";
      var open = p.status === "pending_approval" && p.seconds_left > 0;
      setActionsEnabled(open);
      show("actions", open);
      show("queue", false);
      show("operation", false);
      show("detail", true);
      startCountdown(p.seconds_left);
      var warned = (p.warnings || []).length;
      if (!keepAlert) {
        say("Opened proposal " + p.proposal_id + " (" + p.tool + ", " + p.status + ")" +
          (warned ? "; " + warned + " warning(s) to check before approving." : "."));
        $("detail-title").focus();
      } else if (notice) {
        say(notice + (warned ? " " + warned + " warning(s) to check before approving." : ""));
        $("detail-title").focus();
      }
    }, alertError);
  }

  function afterDecision(reply) {
    var text = "Recorded your " + reply.decision + ". Status: " + reply.status + ".";
    if (reply.verdict === "pending" && reply.still_needed) { text += " " + reply.still_needed + "."; }
    say(text);
    if (reply.status === "pending_approval") { return openProposal(reply.proposal_id, true); }
    return follow(reply.operation_key);
  }

  function decideWith(path, body) {
    clearAlert();
    setActionsEnabled(false);
    return api(path, { method: "POST", body: body }).then(afterDecision, function (err) {
      alertError(err);
      // the refusal may come from a changed proposal: show it as it is now
      if (current && err.status !== 401) { return openProposal(current.proposal_id, true); }
    });
  }

  function onApprove(event) {
    event.preventDefault();
    if (!current) { return; }
    // the digest sent is the one on screen: a proposal changed since then is refused
    decideWith("toolgate/proposals/" + encodeURIComponent(current.proposal_id) + "/approve",
      { digest: $("digest").textContent });
  }

  function onReject(event) {
    event.preventDefault();
    if (!current) { return; }
    var reason = $("reject-reason").value.trim();
    if (!reason) {
      alertError({ code: "reason_required", message: "a rejection needs a reason" });
      $("reject-reason").focus();
      return;
    }
    decideWith("toolgate/proposals/" + encodeURIComponent(current.proposal_id) + "/reject", { reason: reason });
  }

  function onEdit(event) {
    event.preventDefault();
    if (!current) { return; }
    var args;
    try {
      args = JSON.parse($("edit-arguments").value);
    } catch (e) {
      alertError({ code: "invalid_json", message: "the edited arguments are not JSON: " + e.message });
      $("edit-arguments").focus();
      return;
    }
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      alertError({ code: "invalid_json", message: "the edited arguments must be a JSON object" });
      $("edit-arguments").focus();
      return;
    }
    clearAlert();
    setActionsEnabled(false);
    var original = current.proposal_id;
    api("toolgate/proposals/" + encodeURIComponent(original) + "/edit",
      { method: "POST", body: { arguments: args } }).then(function (reply) {
      var notice = "Edited: new proposal " + reply.proposal_id + " replaces " + original +
        " (digest " + reply.digest + "). It needs its own approval, by someone other than you.";
      return openProposal(reply.proposal_id, true, notice);
    }, function (err) {
      alertError(err);
      if (err.status !== 401) { return openProposal(original, true); }
    });
  }

  // ---- following the operation ---------------------------------------------------------

  function renderTrace(report) {
    var rows = $("trace-rows");
    rows.textContent = "";
    report.events.forEach(function (e) {
      var tr = document.createElement("tr");
      [["#", e.seq], ["Event", e.event], ["Result", e.result], ["Code", e.code]].forEach(function (c) {
        cell(tr, c[1] === null || c[1] === undefined ? "" : String(c[1]), c[0]);
      });
      // timestamps, hashes and revisions: code, the only cells that may wrap anywhere
      // the time as RFC 3339 allows it, date and time apart: a narrow column breaks it between them only
      var when = cell(tr, "", "At");
      when.className = "keep";
      String(e.at === null || e.at === undefined ? "" : e.at).split("T").forEach(function (part, i) {
        if (i) { when.appendChild(document.createTextNode(" ")); }
        var code = document.createElement("code");
        code.textContent = part;
        when.appendChild(code);
      });
      [["Actor (hashed)", e.actor, false], ["Release", e.release, true],
        ["Handler", e.handler, true]].forEach(function (c) {
        codeCell(tr, c[1] === null || c[1] === undefined ? "" : String(c[1]), c[0], c[2]);
      });
      rows.appendChild(tr);
    });
    $("trace-summary").textContent = report.events.length + " event(s); final state " + report.final +
      "; missing transitions: " + (report.missing.length ? report.missing.join(", ") : "none") +
      "; approver " + report.approver + "; audit chain " + report.tamper_check + ".";
  }

  // audit events are for auditors only, at this door as on the CLI: a reviewer following the
  // operation is told so instead of seeing an error
  function loadTrace(key) {
    return api("toolgate/operations/" + encodeURIComponent(key) + "/trace").then(function (report) {
      show("trace-wrap", true);
      renderTrace(report);
      return report;
    }, function (err) {
      $("trace-rows").textContent = "";
      show("trace-wrap", false);
      if (err.code === "not_auditor") {
        $("trace-summary").textContent = "The audit trace is shown to auditors (role auditor) only.";
        return null;
      }
      $("trace-summary").textContent = "";
      alertError(err);
      return null;
    });
  }

  // an auditor's view of one operation (console#trace=KEY): its audit trace and the final state
  // the trace shows; the result itself is for the operation's reviewers and requester
  function auditTrace(key) {
    stopTimers();
    show("detail", false);
    show("queue", false);
    show("operation", true);
    setText("operation-key", key);
    setText("operation-status", "");
    $("operation-result").textContent = "";
    return loadTrace(key).then(function (report) {
      if (report) {
        setText("operation-status", report.final);
        say("Audit trace of " + key + ": final state " + report.final + ".");
      }
    });
  }

  function requestedTrace() {
    var match = /^#trace=([A-Za-z0-9_.:-]{1,200})$/.exec(window.location.hash);
    return match ? match[1] : null;
  }

  function follow(key) {
    stopTimers();
    show("detail", false);
    show("queue", false);
    show("operation", true);
    setText("operation-key", key);
    var polls = 0;
    var announced = null;
    function poll() {
      timers.poll = null;
      api("toolgate/operations/" + encodeURIComponent(key)).then(function (op) {
        setText("operation-status", op.status);
        $("operation-result").textContent = JSON.stringify(op.result !== null ? op.result : op.error, null, 2);
        if (op.status !== announced) { announced = op.status; say("Operation status: " + op.status + "."); }
        polls += 1;
        if (FINAL.indexOf(op.status) >= 0 || polls >= MAX_POLLS) {
          if (FINAL.indexOf(op.status) < 0) { say("Still " + op.status + "; refresh later to see the outcome."); }
          return loadTrace(key);
        }
        timers.poll = window.setTimeout(poll, POLL_MS);
      }, alertError);
    }
    loadTrace(key);
    poll();
    $("operation-title").setAttribute("tabindex", "-1");
    $("operation-title").focus();
  }

  // ---- wiring --------------------------------------------------------------------------

  function backToList() {
    clearAlert();
    loadList().then(function () { $("refresh").focus(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("signin-form").addEventListener("submit", onSignIn);
    $("sign-out").addEventListener("click", function () {
      signOut();
      clearAlert();
      say("Signed out.");
      $("token-input").focus();
    });
    $("refresh").addEventListener("click", function () { clearAlert(); loadList(); });
    $("approve-form").addEventListener("submit", onApprove);
    $("reject-form").addEventListener("submit", onReject);
    $("edit-form").addEventListener("submit", onEdit);
    $("back").addEventListener("click", backToList);
    $("operation-back").addEventListener("click", backToList);
    try { window.sessionStorage.removeItem(LEGACY_TOKEN_KEY); } catch (e) { /* storage disabled */ }
    signOut();
  });
})();
