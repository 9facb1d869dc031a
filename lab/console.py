"""Console helpers for the demos: headers, aligned tables (CJK-aware), observations."""
import unicodedata


def display_width(text) -> int:
    """Terminal columns a string takes: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1
               for ch in str(text))


def _pad(text, width, right=False):
    text = str(text)
    fill = " " * (width - display_width(text))
    return fill + text if right else text + fill


def print_header(title):
    line = "=" * max(60, display_width(title) + 4)
    print(f"\n{line}\n  {title}\n{line}")


def print_table(headers, rows):
    """Columns sized to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(display_width(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) if rows else False
               for i in range(len(headers))]
    print("  ".join(_pad(h, w) for h, w in zip(cells[0], widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in cells[1:]:
        print("  ".join(_pad(c, w, right=num) for c, w, num in zip(r, widths, numeric)).rstrip())


def print_observations(items, title="Observations:"):
    print(f"\n{title}")
    for i, text in enumerate(items, 1):
        print(f"  {i}. {text}")
