"""Part 2's test bench: your pool and sequences side by side with the lab's contiguous KVCache.

Every PagedSequence the test makes gets a twin, a contiguous `KVCache` that sees the same tokens;
`step` runs your paged_step and then checks what every step must do (the logits and lengths of the
twins, ceil(length / B) distinct blocks per table). Block tables are compared by allocation order:
an expected [0, 2] means "the 1st and 3rd blocks a correct pool hands out here", so which ids your
allocator picks (Part 1) does not matter, only the order in which Part 2 asks for blocks. Messages
name the sequences seq 0, seq 1, ... in the order the test made them, and each call by its number.
"""
import math

import numpy as np
import pytest

import explain
import rules
import scenarios as sc
import support
import transformer_lab as tl

SECTION = "Part 2: paged KV and the paged step"
SMALL = support.SMALL       # vocab 40, max_len 12, 3 layers, 2 heads: nothing depends on TINY's sizes
NAN_HINT = ("  A non-finite value usually means a softmax without its maximum subtracted, or a read of slots "
            "never written (storage is not zero after reuse).")


def fail(message):
    support.fail(message, SECTION)


class SideBySide:
    """A pool of n_blocks blocks of your BlockPool, of which the test holds `held` (and then gives
    back the ones in `given_back`, by index), as other sequences would in a used pool."""

    def __init__(self, pk, block_size, n_blocks=16, cfg=None, held=0, given_back=(), fill_seed=None):
        waits = support.needs_part1(pk, "this test of paged KV", copies=False)
        if waits:       # its pool's alloc, decref and n_free shape every story here (the hidden grader's ledger
            support.wait(waits)       # stands in for them: a bug of Part 1 costs Part 1's tests alone)
        self.pk, self.B, self.cfg = pk, block_size, sc.config(cfg)
        self.params = sc.params(self.cfg, 0)
        setup = [["alloc"]] * held + [["release", h] for h in given_back]
        self.order = sc.alloc_order(pk, self.cfg, n_blocks, block_size, setup)      # your pool's order
        self.contract = support.contract_order(n_blocks, setup)                   # a correct pool's
        self.pool = sc.working_pool(pk, self.cfg, n_blocks, block_size)
        self.held, self.seqs, self.twins, self.reserved, self.compared, self.n_calls = [], [], [], set(), True, 0
        self.last = "the test's setup"
        try:
            self.take(held)
            for h in given_back:
                self.pool.decref(self.held[h])
        except Exception as e:  # noqa: BLE001  (the pool's own calls failed before any of Part 2 ran)
            pytest.skip(f"this test shapes its pool with alloc and decref, and they raised {type(e).__name__}: "
                        f"{e}: fix Part 1 first")
        if fill_seed is not None:
            sc.fill_storage(self.pool, fill_seed)        # a used pool's storage is not zero

    # ------------------------------------------------------------------------- what the test does
    def new_sequence(self):
        """PagedSequence(pool), with its contiguous twin."""
        self.seqs.append(sc.build("PagedSequence", self.pk.PagedSequence, self.pool))
        self.twins.append(tl.KVCache(self.cfg, 1))
        return self.seqs[-1]

    def take(self, n):
        """The test takes n blocks (pool.alloc), as another sequence would."""
        for _ in range(n):
            try:
                self.held.append(self.pool.alloc())
            except MemoryError as e:
                fail(f"after {self.last}: the test's own pool.alloc() raised MemoryError ({e}), "
                     f"with n_free = {sc.as_int(self.pool.n_free)}\n{self.draw('tables')}")

    def give_back(self, h):
        """The test gives back the h-th block it took (pool.decref), while the sequences hold theirs:
        the next block a sequence gets may then lie before its others (a table out of order)."""
        self.pool.decref(self.held[h])
        self.last = f"the test's pool.decref of its block {h}"

    def read_matches(self, seq):
        """seq.read(layer, length) at every layer equals its twin's cache: the table in its order."""
        twin = self.twins[self.index(seq)]
        for layer in range(self.cfg.n_layers):
            what, (k, v) = self.succeeds(seq.read, layer, twin.length)
            for name, got, want in (("K", k, twin.k[layer, 0, :twin.length]), ("V", v, twin.v[layer, 0, :twin.length])):
                support.close(f"{what}[{'01'[name == 'V']}] ({name}, index [position, head, d]) vs the contiguous "
                              f"cache, through the table {list(seq.blocks)}", want, sc.as_array(got), support.TOL_LOGITS, SECTION)

    def leave_free(self, n):
        """The test takes blocks until exactly n are free (by your pool.n_free)."""
        self.take(sc.as_int(self.pool.n_free) - n)

    def share_last_block(self, seq):
        """The test takes one more reference to seq's last block (pool.incref), so writing into it
        needs a copy. From here on logits are not compared with the twins: the copy is Part 4's."""
        self.pool.incref(seq.blocks[-1])
        self.compared = False

    def mirror(self, seq):
        """A new sequence sharing seq's blocks, made by the test as fork would: the same table and
        length, pool.incref of each block. Logits are not compared from here on (as above)."""
        other = self.new_sequence()
        for b in seq.blocks:
            self.pool.incref(b)
        other.blocks, other.length, self.compared = list(seq.blocks), seq.length, False
        return other

    def overwrite(self, seq, position, seed):
        """The test writes random K/V for one position of seq straight into pool.k / pool.v. The twins
        cannot know: from here on logits are not compared with them (the test compares them itself)."""
        self.compared = False
        sc.put_kv(self.pool, [sc.as_int(b) for b in seq.blocks], position, 1, seed)

    def needs_copy_on_write(self):
        """Skip the rest of the test while copy-on-write (Part 4) does not work: it copies a block."""
        if not support.copies_work(self.pk):
            pytest.skip(support.needs_copies(self.pk))

    def step(self, seqs, chunks, as_numpy=False):
        """paged_step(params, cfg, seqs, chunks), which must succeed; then each sequence's logits and
        length must equal its twin's, fed the same chunk, and every table hold ceil(length / B)
        distinct blocks, none in another table. Returns the logits."""
        chunks = [np.array(c, dtype=np.int64) if as_numpy else list(c) for c in chunks]
        what, got = self.succeeds(self.pk.paged_step, self.params, self.cfg, list(seqs), chunks)
        expected = [tl.forward(self.params, self.cfg, np.array([list(c)], dtype=np.int64),
                               cache=self.twins[self.index(s)])[0] for s, c in zip(seqs, chunks)]
        if not self.compared:
            return [sc.as_array(g) for g in got]
        support.equal(f"{what}: number of logits arrays returned", len(expected), len(got), SECTION)
        for s, e, g in zip(seqs, expected, got):
            support.close(f"{what}: logits of seq {self.index(s)} (index [position in chunk, token]) vs the "
                          "contiguous forward with a KVCache", e, g, support.TOL_LOGITS, SECTION, NAN_HINT)
        support.equal(f"{what}: sequence lengths", [c.length for c in self.twins], self.state()["lengths"], SECTION)
        self.check_table_shapes(what)
        return [sc.as_array(g) for g in got]

    def reserve(self, seq, n):
        """seq.reserve(n), which must succeed."""
        self.reserved.add(self.index(seq))
        what, _ = self.succeeds(seq.reserve, n)
        self.check_table_shapes(what)

    def raises(self, kind, why, fn, *args):
        """fn(*args) must raise kind (MemoryError, ValueError) and change nothing you can observe."""
        what, before = self._describe(fn, args), self.state()
        try:
            fn(*args)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001  (the kind is checked below)
            if not isinstance(e, kind):
                fail(f"{what}: expected {kind.__name__} ({why}), got {type(e).__name__}: {e}")
        else:
            fail(f"{what}: expected {kind.__name__} ({why}), got no error")
        self.unchanged(before, f"{what}: a call that raised {kind.__name__}")

    # --------------------------------------------------------------------------- what it checks
    def succeeds(self, fn, *args):
        """(what was called, fn(*args)); fails the test with what was called and what it raised."""
        what = self._describe(fn, args)
        try:
            return what, fn(*args)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001  (any error of your code is the failure)
            short = rules.short_of(self.state(), self.B)
            fail(f"{what}: expected it to succeed, but it raised {type(e).__name__}: {str(e)[:300]}"
                 + (f"; {short}" if short else ""))

    def tables(self, expected, why):
        """The sequences' tables, compared by place in the allocation order; on failure both drawn."""
        state = self.state()
        want = [rules.canonical(t, self.contract) for t in expected]
        got = [rules.canonical(t, self.order) for t in state["tables"]]
        if want != got:
            yours = "" if self.order == self.contract else (
                f"\n  (your pool hands out blocks in the order {self.order[:8]}..., a correct one "
                f"{self.contract[:8]}...: compared by that order, blocks #k = the k-th handed out)")
            fail(f"after {self.last}: block tables differ ({why}): expected, by allocation order, "
                 f"{_named(want)}, got {_named(got)}\n"
                 + explain.draw_tables("expected", expected, state["lengths"], self.B) + "\n"
                 + self.draw("got", state) + yours)

    def kv_stored(self):
        """Each sequence's K/V read straight from pool storage through its table
        (pool.k[layer, blocks[p // B], p % B]) equal its twin's cache."""
        for s, (seq, twin) in enumerate(zip(self.seqs, self.twins)):
            expected = {"k": twin.k[:, 0, :twin.length], "v": twin.v[:, 0, :twin.length]}
            why = rules.kv_difference(expected, sc.gathered_kv(seq))
            if why:
                fail(f"after {self.last}: seq {s}'s K/V read from pool storage through its table "
                     f"(pool.k[layer, blocks[p // B], p % B]) differ from the contiguous cache: {why}\n"
                     + self.draw("got"))

    def check_table_shapes(self, what):
        """ceil(length / B) distinct blocks per table (more only after a bare reserve), none shared."""
        state, seen = self.state(), {}
        for s, (table, length) in enumerate(zip(state["tables"], state["lengths"])):
            need = math.ceil(length / self.B) if isinstance(length, int) else None
            if need is None or len(set(table)) != len(table) or len(table) < need or (
                    len(table) > need and s not in self.reserved):
                fail(f"{what}: seq {s} has length {length}, so its table must hold ceil({length} / {self.B}) = "
                     f"{need} distinct blocks, it holds {table}\n{self.draw('got', state)}")
            for b in table:
                if b in seen:
                    fail(f"{what}: block {b} is in the tables of seq {seen[b]} and seq {s}: without fork, "
                         f"sequences never share a block\n{self.draw('got', state)}")
                seen[b] = s

    def unchanged(self, before, what):
        after = self.state()
        diffs = [k for k in support.STATE if before[k] != after[k]]
        if diffs:
            lines = [f"{what} must change nothing, but it changed {', '.join(diffs)}:"]
            lines += [f"    {k}: before {before[k]}, after {after[k]}" for k in diffs]
            if "tables" in diffs or "lengths" in diffs:
                lines += [self.draw("before", before), self.draw("after", after)]
            fail("\n".join(lines))

    # ------------------------------------------------------------------------------- describing
    def state(self):
        """Everything observable, as plain data: tables, lengths, refcounts, n_used, n_free, ..."""
        return {**sc.seq_state(self.seqs), **sc.pool_state(self.pool)}

    def draw(self, title, state=None):
        state = state or self.state()
        return explain.draw_tables(title, state["tables"], state["lengths"], self.B, state["refcounts"])

    def index(self, seq):
        return next(i for i, s in enumerate(self.seqs) if s is seq)

    def _describe(self, fn, args):
        """'call 3, paged_step(seqs [0, 1], chunks of 7, 1 tokens)', 'call 4, seq 0.reserve(5)'."""
        self.n_calls += 1
        if fn is self.pk.paged_step:
            seqs, chunks = args[-2:]
            sizes = ", ".join(str(len(c)) for c in chunks) or "no"
            idx = [self.index(s) for s in seqs]
            self.last = f"call {self.n_calls}, paged_step(seqs {idx}, chunks of {sizes} tokens)"
        else:
            shown = ", ".join(str(a) if np.isscalar(a) else f"[{' x '.join(map(str, np.shape(a)))}]" for a in args)
            self.last = f"call {self.n_calls}, seq {self.index(fn.__self__)}.{fn.__name__}({shown})"
        return self.last


def _named(tables):
    return "[" + ", ".join("[" + ", ".join(f"#{b}" if isinstance(b, int) else str(b) for b in t) + "]"
                           for t in tables) + "]"
