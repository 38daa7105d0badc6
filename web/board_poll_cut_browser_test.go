package web

// pollCutMeasure lists, in words, what of the class's vote and the scores
// on the board shows cut: a line of the vote, a row of the scores or
// their heading that a box scrolling inside (the vote's, the scores'
// list) shows only in part. Each shows whole, or not at all, a scroll
// away: never half of it at the box's edge.
const pollCutMeasure = `(() => {
  const problems = [];
  const r = e => e.getBoundingClientRect();
  const text = e => e.textContent.replace(/\s+/g, " ").trim().slice(0, 40);
  const poll = document.getElementById("poll");
  if (!poll || !poll.checkVisibility()) return problems;
  const parts = "#poll-q, .poll-when, .poll-choice, .poll-status, .poll-outcome, .poll-actions, .poll-scores h3, .poll-scores li, .poll-more";
  for (const e of poll.querySelectorAll(parts)) {
    if (!e.checkVisibility() || r(e).height < 2) continue;
    const b = r(e);
    for (let box = e.parentElement; box && box !== poll.parentElement; box = box.parentElement) {
      const o = getComputedStyle(box).overflowY;
      if (o === "visible") continue;
      const c = r(box);
      const seen = Math.min(b.bottom, c.bottom) - Math.max(b.top, c.top);
      if (seen <= 1) break; // a scroll away inside this box: whole, unseen
      if (seen < b.height - 1) {
        problems.push(text(e) + " shows " + Math.round(seen) + " of its " + Math.round(b.height) + " px in " + box.tagName.toLowerCase() + (box.id ? "#" + box.id : "." + box.className.split(" ")[0]));
        break;
      }
    }
  }
  // The scores' heading is type for the room, as large as the rows it heads.
  const h = poll.querySelector(".poll-scores h3"), li = poll.querySelector(".poll-scores li");
  if (h && li && h.checkVisibility() && li.checkVisibility()) {
    const hs = parseFloat(getComputedStyle(h).fontSize), ls = parseFloat(getComputedStyle(li).fontSize);
    if (hs < ls - .5) problems.push("the heading " + text(h) + " is " + hs + " px, smaller than its rows' " + ls + " px");
  }
  return problems;
})()`
