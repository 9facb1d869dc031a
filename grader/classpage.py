"""The class report as one self-contained web page (no script, no file or font it loads): the
counts, the base score and every part as inline SVG histograms, the checks failed most often with
the first message of the first submission that failed each, the integrity flags with the similar
files beside them (clusters, each pair's normalized and raw similarity, the closest pairs outside
them, and a link to `make similarity`'s side-by-side report when it is there), and every
gradebook row with a link to its feedback file. Staff only: it names students, flags and
hidden-input failures.

The numbers are classview's (the text summary's); this module only draws them. Every text that
comes from a file name or a message is escaped.
"""
import html
import os
import re
from pathlib import Path
from urllib.parse import quote

from grader import classview, gradebook, handback, resemblance, rubric, triage
from grader.integrity import Flags

BAR_W, GAP, PLOT_H, PAD = 44, 8, 120, 22
MESSAGE_LINES = 14
NUM = ' class="num"'

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1180px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; }
figure { margin: 0; padding: 8px; border: 1px solid #e4e4e4; border-radius: 6px; }
figcaption { font-size: 13px; color: #444; max-width: 420px; }
svg rect.bar { fill: #4c78a8; } svg text { font-size: 11px; fill: #333; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ddd; padding: 3px 6px; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; font-size: 12px; max-width: 640px; }
.flag { color: #a40000; } li { margin: 4px 0; }
"""
SIDE_BY_SIDE = "similarity.html"     # make similarity's default report, beside the page


def _e(text):
    return html.escape(str(text), quote=True)


def histogram(bins, caption):
    """An inline SVG bar chart of [(label, count)], with its caption."""
    top = max((n for _, n in bins), default=0) or 1
    width = PAD + len(bins) * (BAR_W + GAP)
    height = PLOT_H + 2 * PAD
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{_e(caption)}">',
             f'<line x1="{PAD // 2}" y1="{PAD + PLOT_H}" x2="{width}" y2="{PAD + PLOT_H}" stroke="#999"/>']
    for i, (label, n) in enumerate(bins):
        x = PAD // 2 + GAP // 2 + i * (BAR_W + GAP)
        h = round(PLOT_H * n / top)
        parts.append(f'<rect class="bar" x="{x}" y="{PAD + PLOT_H - h}" width="{BAR_W}" height="{h}">'
                     f'<title>{_e(label)}: {n}</title></rect>')
        parts.append(f'<text x="{x + BAR_W // 2}" y="{PAD + PLOT_H - h - 4}" text-anchor="middle">{n}</text>')
        parts.append(f'<text x="{x + BAR_W // 2}" y="{PAD + PLOT_H + 15}" text-anchor="middle">{_e(label)}</text>')
    parts.append("</svg>")
    return f'<figure>{"".join(parts)}<figcaption>{_e(caption)}</figcaption></figure>'


class _Html(str):
    """Markup built here, its texts already escaped."""


def _table(header, rows, numeric=()):
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for r in rows:
        cells = "".join(f"<td{NUM if i in numeric else ''}>{c if isinstance(c, _Html) else _e(c)}</td>"
                        for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def page(results, rows, flags=None, feedback_href=None, side_by_side=None):
    """The page's HTML. results: name -> results dict or None; rows: the gradebook rows (in class
    order); feedback_href(row): the link to that row's feedback file, or None for no link;
    side_by_side: the link to make similarity's report, or None."""
    flags = flags or Flags()
    graded = classview.groups(results, flags)[0]
    scored = [r for r in results.values() if r is not None]
    said, apart = classview.counts(results, flags)
    out = [f"<h1>CS349E PagedAttention: class report</h1><p>{_e(said)}</p>",
           *(f"<p>{_e(label.capitalize())}: {_e(', '.join(names))}</p>" for label, names in apart)]
    out.append('<h2 id="scores">Scores</h2><div class="charts">')
    if scored:
        values = classview.base_scores(scored)
        out.append(histogram(classview.base_bins(values), f"Base score out of {rubric.TOTAL} (Parts 1-4), "
                                                          f"{len(scored)} submissions: {classview.stats(values)}"))
        for part in rubric.ALL_PARTS:
            got, skipped = classview.part_view(scored, part)
            extra = f", extra credit; not attempted by {skipped}" if part in rubric.BONUS_PARTS else ""
            caption = f"{rubric.SECTIONS[part]} ({rubric.part_points(part)} points{extra}): " + \
                (classview.stats(got) if got else "nobody")
            out.append(histogram(classview.part_bins(got, rubric.part_points(part)), caption))
    out.append("</div>")
    ranked = classview.most_failed([results[n] for n in graded])
    out.append(f'<h2 id="failed">Checks failed most often</h2><p>By the {len(graded)} graded submissions that '
               "were started; the message is the first failing submission's first failure.</p>")
    out.append(_table(["failed by", "check", "what it checks", "first message"],
                      [(f"{n} of {len(graded)}", check_id, rubric.CHECKS[check_id].title,
                        _Html(f"<pre>{_e(_lines(message))}</pre>")) for check_id, n, message in ranked], numeric=(0,))
               if ranked else "<p>none</p>")
    out.append('<h2 id="flags">Integrity flags</h2><p>Look before publishing; no flag changes a grade.</p>')
    out += [f"<p>{_e(flags.ids)}</p>"] if flags.ids else []
    flagged = [(r["submission"], r["student_id"], _Html(f'<span class="flag">{_flag_links(r["flags"])}</span>'))
               for r in rows if r["flags"]]
    out.append(_table(["submission", "student_id", "flags"], flagged) if flagged else "<p>none</p>")
    out.append(_similarity(flags, side_by_side))
    columns = [c for c in gradebook.fields() if c not in ("submission", "flags")]
    numeric = {i + 1 for i, c in enumerate(columns) if c in ("base", "extra_credit", "total", *rubric.ALL_PARTS)}
    out.append('<h2 id="students">Submissions</h2>')
    out.append(_table(["submission", *columns, "flags"],
                      [(_link(r, feedback_href), *(r[c] for c in columns), r["flags"]) for r in rows],
                      numeric=numeric))
    body = "\n".join(out)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>CS349E PagedAttention: class report</title><style>{STYLE}</style></head>\n<body>\n{body}\n"
            "</body></html>\n")


def _lines(message):
    lines = message.splitlines()
    return "\n".join(lines[:MESSAGE_LINES] + ([f"... ({len(lines) - MESSAGE_LINES} more lines)"]
                                              if len(lines) > MESSAGE_LINES else []))


def _link(row, href):
    target = href(row) if href else None
    return _Html(f'<a href="{_e(target)}">{_e(row["submission"])}</a>') if target else row["submission"]


def _flag_links(text):
    """A flags cell, escaped, its "(cluster N)" linked to the cluster on this page."""
    return re.sub(r"\(cluster (\d+)\)", r'(<a href="#cluster-\1">cluster \1</a>)', _e(text))


def _similarity(flags, side_by_side):
    """The similar files: one item per cluster with each member's strongest pair in it, then the
    closest pairs outside the clusters (how far below the threshold the rest of the class is)."""
    out = [f'<h2 id="similarity">Similar files</h2><p>Normalized similarity (the code as Python reads it, '
           f"no-op statements gone, names canonical, definitions in a canonical order) and raw (as written), "
           f"the starter not counted; a cluster holds the files linked by a pair at or above "
           f"{resemblance.FLAG:.0%}. {triage.SOLUTION} is solution/paged_kv.py.</p>"]
    if side_by_side:
        out.append(f'<p>Side by side: <a href="{_e(side_by_side)}">{_e(SIDE_BY_SIDE)}</a> (copydetect, '
                   "make similarity).</p>")
    else:
        out.append("<p>Side by side: <code>make similarity DIR=...</code> writes build/similarity.html, and the next "
                   "batch run links it here.</p>")
    header = ["file", "other file", "normalized", "raw", "normalized, each way"]

    def pair_row(p):
        return (p.a, p.b, f"{p.norm:.0%}", f"{p.raw:.0%}", f"{p.norm_a:.0%} / {p.norm_b:.0%}")
    items = [f'<li id="cluster-{c.number}">{_e(c.line())}{_table(header, map(pair_row, c.links()), numeric=(2, 3))}'
             "</li>" for c in flags.similar]
    out.append(f"<ul>{''.join(items)}</ul>" if items else "<p>No cluster.</p>")
    others = triage.closest_others(flags.pairs, flags.similar)
    if others:
        out.append("<p>The closest pairs besides:</p>" + _table(header, map(pair_row, others), numeric=(2, 3)))
    return "".join(out)


def write(path, results, rows, flags, feedback_folder, stems=None):
    """Write the page at `path`, its links relative to it (the page and the feedback folder move
    together). stems: {(submission, student_id): its feedback file's stem} (handback.file_names);
    by default each row's student_id made safe."""
    path, folder = Path(path), Path(feedback_folder)
    rel = os.path.relpath(folder, path.parent)

    def href(row):
        stem = (stems or {}).get((row["submission"], row["student_id"])) if stems is not None \
            else handback.safe(row["student_id"])
        feedback = handback.path_of(folder, stem) if stem else None
        return f"{quote(rel)}/{quote(feedback.name)}" if feedback and feedback.is_file() else None
    side = path.parent / SIDE_BY_SIDE
    tmp = path.with_name(f".{path.name}.writing")
    tmp.write_text(page(results, rows, flags, href, SIDE_BY_SIDE if side.is_file() else None), encoding="utf-8")
    tmp.replace(path)
    return path
