"""Append the `## Exercises` section (one markdown cell, one code cell) to the end of each method chapter,
and run its code cell alone to store the grader's message on the stub.

    python tools/exercise_sections.py                  # every method chapter
    python tools/exercise_sections.py 01_attention     # only these

Every other cell (ids, outputs) stays as it is; re-running replaces only the section it appended before.
The sections' code cells are self-contained (they import `check` and define a stub), so running them
alone gives the same output as running the whole chapter. After it: `nbdev_clean`.
"""
import hashlib, json, sys
from pathlib import Path

NBS = Path(__file__).resolve().parents[1] / "nbs"

INTRO = ("Implementation exercises are graded with `check` from `lengthx.exercises`, which runs property tests "
         "and compares with a reference; `inspect.getsource(solution(id))` shows the reference after you have tried "
         "([how grading works](80_exercises.ipynb)). ★ warm-up, ★★ needs thought, ★★★ open-ended.\n\n")

EX = {}

EX["01_attention"] = ("""**Exercise 1.1** (implement, ★, autograded). Write `attend(q, k, v, causal)`: $\\mathrm{softmax}(qk^\\top/\\sqrt d)\\,v$ for `q, k, v` of shape `[..., T, d]`, with no positional information; with `causal=True`, query $i$ sees keys $j \\le i$ only. The grader checks the two facts this chapter rests on — without a mask, permuting the tokens permutes the output; with the mask, changing future keys never moves an earlier output — and compares with `attention(..., build_pe("nope", ...))`.

**Exercise 1.2** (derive, ★★). (a) Prove that for any permutation matrix $P$, $\\mathrm{Attn}(PQ, PK, PV) = P\\,\\mathrm{Attn}(Q, K, V)$ when there is no mask and no PE, so a NoPE encoder sees a bag of tokens. (b) Show that the causal mask breaks this with a two-token counterexample. (c) Let token 0 carry a value $v_0$ and every later token the value 0, and suppose all scores are equal. Show that the causal output at position $t$ is $v_0/(t+1)$: a causal NoPE decoder can read its own absolute position. Which assumption about the scores did (c) use, and what happens to it at positions far beyond training?

**Exercise 1.3** (experiment, ★★★). *Predict first, in writing:* at initialization (random $q, k$, no training), how does the mean attention weight depend on the distance $i-j$ for `nope`, `alibi`, `t5` and `rope`? Then build each PE with `build_pe(spec, n_heads=4, head_dim=16)`, run `attention(q, k, v, pe, Positions.arange(1, 256), path="naive", return_weights=True)` on random inputs, and plot the mean weight against distance. Explain each curve from the logit formula $A = \\mathcal R(Q)\\mathcal R(K)^\\top/\\sqrt d + B + f$. Research extension: repeat with $q = k$ equal at every position (identical tokens); which PEs can still tell positions apart, and through which term?""",
"""from lengthx.exercises import check

def attend(q, k, v, causal=False):
    "Exercise 1.1: softmax(q·kᵀ/√d)·v with an optional causal mask — replace this stub."
    raise NotImplementedError

passed = check("1.1", attend)""")

EX["02_absolute"] = ("""**Exercise 2.1** (implement, ★, autograded). Write `sinusoidal(pos, dim, base=10000.0)` returning the table $p_t$ of shape `[T, dim]`: $\\sin(t\\omega_i)$ in dimension $2i$ and $\\cos(t\\omega_i)$ in $2i+1$, with $\\omega_i = \\text{base}^{-2i/d}$. The grader checks the layout at position 0, the values, and the shift property $p_{t+k} = M_k p_t$ with this chapter's `shift_matrix`.

**Exercise 2.2** (derive, ★★). Derive the $2\\times2$ block of $M_k$ for pair $i$ from the angle-addition formulas, and show it does not depend on $t$. Deduce $p_m^\\top p_n = \\sum_i \\cos((m-n)\\omega_i)$. Then expand the first-layer logit $(x_m+p_m)^\\top W_Q^\\top W_K (x_n+p_n)$ and name the terms that still depend on the absolute positions $m$ and $n$: why does a relative $p_m^\\top p_n$ not make the model relative?

**Exercise 2.3** (experiment, ★★). *Predict first:* is $p_m^\\top p_n$ a decreasing function of $|m-n|$? Plot it against $|m-n| \\in [0, 4096]$ for $d = 16$ and $d = 512$. Where is its first local minimum, and how does that compare with the shortest and longest wavelengths $2\\pi/\\omega_i$? Chapter 22's Sandwich uses exactly this function as an attention bias: what does your plot predict about Sandwich far beyond the training length?""",
"""from lengthx.exercises import check

def sinusoidal(pos, dim, base=10000.0):
    "Exercise 2.1: the interleaved sin/cos table [T, dim] — replace this stub."
    raise NotImplementedError

passed = check("2.1", sinusoidal)""")

EX["10_rope"] = ("""**Exercise 10.1** (implement, ★, autograded). Write `rope_rotate_half(x, pos, inv_freq)` for `x` of shape `[..., T, d]` in the GPT-NeoX layout: dimension $i$ pairs with $i + d/2$, and the pair is rotated by $m\\theta_i$. Do not call this chapter's functions. The grader checks position 0, norm preservation, that $q_m\\cdot k_n$ depends only on $m - n$, and the values — a correct rotation in the *interleaved* layout passes the first three and is caught by the fourth.

**Exercise 10.2** (derive, ★★, autograded). Find the permutation $\\pi$ of $\\{0,\\dots,d-1\\}$ with `rope_rotate_half(x[..., π], pos, θ) == rope_interleaved(x, pos, θ)[..., π]`, and return it from `layout_permutation(d)` for `check("10.2", ...)`. Conclude that a checkpoint trained in one layout runs in the other after permuting the output features of $W_Q$ and $W_K$ (the rows of their `nn.Linear` weights), with identical logits. Why does the permutation not have to touch $W_V$?

**Exercise 10.3** (experiment, ★★). *Predict first:* raising the base from $10^4$ to $5\\cdot10^5$ (as long-context models do) makes the long-term decay bound fall faster or slower with distance? Plot `rope_decay_bound` for both bases over distances 1..8192 with $d = 64$, and explain the difference with the wavelengths $2\\pi/\\theta_i$.

**Exercise 10.4** (experiment, ★★★). Research question: do the slowest pairs, which never complete a turn inside the training window, cause RoPE's failure beyond it? Train `rope` and `rope:frac=0.25` with this chapter's QUICK setup, evaluate perplexity at 1×, 2× and 4× the training length, and argue from the result. What would you change to make the comparison fair (parameters, the number of rotated pairs, seeds)?""",
"""from lengthx.exercises import check

def rope_rotate_half(x, pos, inv_freq):
    "Exercise 10.1: rotate the pair (x_i, x_{i+d/2}) by pos·θ_i — replace this stub."
    raise NotImplementedError

passed = check("10.1", rope_rotate_half)

def layout_permutation(d):
    "Exercise 10.2: the permutation π as a list of d indices — replace this stub."
    raise NotImplementedError

passed = check("10.2", layout_permutation)""")

EX["11_xpos"] = ("""**Exercise 11.1** (implement, ★, autograded). Write `xpos_scale(pos, dim, scale_base=512.0)` returning the query factor $\\zeta_i^{n/\\gamma}$ of shape `[T, dim/2]`, with $\\zeta_i = (2i + 0.4d)/(1.4d)$. The grader checks position 0, the range $(0, 1]$ and the ordering over pairs, that the product of query and key factors depends only on $m-n$, and the values.

**Exercise 11.2** (derive, ★★). With $\\tilde q_m = \\zeta^{m/\\gamma}\\odot R_m q$ and $\\tilde k_n = \\zeta^{-n/\\gamma}\\odot R_n k$ (per pair), show that $\\tilde q_m^\\top \\tilde k_n$ depends on $m - n$ only, and write the factor each pair contributes. Then show what goes wrong without a causal mask: for $m < n$ the factor grows exponentially with the distance. Which pairs decay fastest, and why is that the right choice given RoPE's long-term decay?

**Exercise 11.3** (experiment, ★★). This chapter centres positions to keep the key factor inside float16's range for longer. *Predict first, by hand, without centring* ($d = 64$, $\\gamma = 512$, $\\zeta_0 = 2/7$): the position at which the key factor $\\zeta_0^{-n/\\gamma}$ overflows float16 (65504), and the one at which the query factor $\\zeta_0^{n/\\gamma}$ underflows to zero (float16's smallest subnormal is $2^{-24}$). Then find both with `xpos_scale(...).half()`. What does a pair whose query factor has underflowed contribute to the logit, and why is a silent zero worse than an `inf`?""",
"""from lengthx.exercises import check

def xpos_scale(pos, dim, scale_base=512.0):
    "Exercise 11.1: the query factor ζ_i^(pos/γ), shape [T, dim/2] — replace this stub."
    raise NotImplementedError

passed = check("11.1", xpos_scale)""")

EX["12_context_extension"] = ("""**Exercise 12.1** (implement, ★, autograded). Write `ntk_inv_freq(dim, base, scale)`: RoPE's $\\theta_i$ computed with the NTK-aware base. The grader checks that $s = 1$ changes nothing, that $\\theta_0$ stays 1 while the slowest pair is slowed by exactly $s$, and the values.

**Exercise 12.2** (derive, ★★). Derive the NTK base: require the slowest pair $\\theta_{d/2-1}$ to turn by the same angle at position $sL$ with the new base as at $L$ with the old one, and solve for $b'$. Show that $\\theta_0$ is unchanged and that every pair in between is slowed by $s^{2i/(d-2)}$. For Position Interpolation, compute by how much the angle between two *adjacent* tokens shrinks for the fastest pair, and explain with the β-ary picture of this chapter why that hurts the nearest tokens most.

**Exercise 12.3** (experiment, ★★★). *Predict first:* which of plain RoPE, PI, NTK, YaRN and ReRoPE will grow least, zero-shot, from the training length to 4× it — growth $\\text{ppl}(4T)/\\text{ppl}(T)$ on the same targets — in this chapter's tiny experiment, and why? Then run the experiment for at least three training seeds (`TrainConfig(seed=…)`), divide each method's growth by RoPE's growth seed by seed, and rank two methods only where the interval of that ratio over seeds excludes 1. For each method that surprised you, point to the periods plot: which pairs does it change, and which did the model rely on?

**Exercise 12.4** (derive, ★★). Dynamic YaRN's schedule. (a) From $s(T) = \\min(s_{\\max}, \\max(1, T/L))$, show that a forward of $T = nL$ tokens with $n \\le s_{\\max}$ reads the model exactly as static `yarn:s=n` does, and say why the experiment's YaRN (s=n) rows are therefore dynamic YaRN's readings, and which reading of dynamic YaRN they cannot give. (b) The authors' module keeps the largest scale it has seen. For the forwards $T = 20, 32, 96, 64, 160, 24$ at $L = 32$, write the scale and the logit temperature $(0.1\\ln s + 1)^2$ that each rule applies, and name the forwards where they differ. (c) At $T = 1.5L$, compare the base that dynamic NTK ($\\alpha' = s\\,T/L - (s-1)$ with $s = 2$) and Qwen's schedule ($\\alpha = 2^{\\lceil \\log_2(T/L) + 1\\rceil} - 1$) give with what dynamic YaRN does to the pairs, for $d = 16$ and base $10^4$: which pairs does each move, and by how much?""",
"""from lengthx.exercises import check

def ntk_inv_freq(dim, base, scale):
    "Exercise 12.1: θ_i with the NTK-aware base — replace this stub."
    raise NotImplementedError

passed = check("12.1", ntk_inv_freq)""")

EX["20_t5_alibi"] = ("""**Exercise 20.1** (implement, ★, autograded). Write `alibi_bias(n_heads, length)` returning $-m_h|i - j|$ of shape `[n_heads, length, length]`, with ALiBi's official slopes: geometric $2^{-8(h+1)/n}$ when $n$ is a power of two, and otherwise the $2^k$ slopes of the largest power of two below $n$ followed by every other slope of the $2^{k+1}$ rule. The grader checks the sign and linearity, the slopes for 8 heads, and 3, 6 and 12 heads.

**Exercise 20.2** (derive, ★★). For unidirectional T5 buckets with 32 buckets and `max_distance=128`, find the distances that land in buckets 15, 16 and 31. Find the exact distance at which bucket 31 starts and explain why it is not `max_distance` (what does the floor do before the clamp?); where does it start for `num_buckets=16, max_distance=32`? Prove that every distance from that start on lands in bucket 31, so a T5 model cannot tell a key 200 tokens back from one 2000 tokens back. Check your answers with `relative_position_bucket`.

**Exercise 20.3** (experiment, ★★). With 8 heads (slopes $1/2, \\dots, 1/256$) and equal content scores, the bias alone sets the attention weights. *Predict first:* for each head, the distance beyond which a key gets less than 1% of the weight of the current token. Then measure it with `attention(..., return_weights=True)` on $q = 0$ at length 1024 and compare. Which heads can still see the whole window at 16× a training length of 64?""",
"""from lengthx.exercises import check

def alibi_bias(n_heads, length):
    "Exercise 20.1: −m_h·|i − j| with the official slopes, [n_heads, length, length] — replace this stub."
    raise NotImplementedError

passed = check("20.1", alibi_bias)""")

EX["21_kerple"] = ("""**Exercise 21.1** (implement, ★, autograded). Write `cpd_anchor_matrix(K)`, the $(n-1)\\times(n-1)$ matrix $M_{ij} = K_{ij} - K_{in} - K_{jn} + K_{nn}$ for $i, j < n$, anchored at the last point. For $c$ with $\\sum_i c_i = 0$ write $c_n = -\\sum_{i<n} c_i$ and show $c^\\top K c = c'^\\top M c'$ with $c' = (c_1, \\ldots, c_{n-1})$, a free vector: so $K$ is CPD exactly when $M$ is PSD. This is a second proof of CPD beside `cpd_margin` — an ordinary PSD test on $n - 1$ points, with no projector. The grader checks the values on random symmetric matrices, that $M$ is symmetric, that $M$ is PSD for this chapter's log, triangle and power ($p \\le 2$) kernels and not for $p = 3$, and that the sign of its smallest eigenvalue agrees with `cpd_margin`.

**Exercise 21.2** (derive, ★★, autograded). The chapter broke the power kernel outside its range with $p = 3$ on the points $\\{0, 1, 2\\}$. Do the same for the 3-parameter log kernel outside its clamp: for every $r_1, r_2 > 0$ and $r_3 > 2$, find points and a sum-zero $c$ with $c^\\top K c < 0$ for $K_{ij} = -r_1\\log(1 + r_2|x_i - x_j|^{r_3})$. Write $c^\\top K c$ for $c = (1, -2, 1)$ on the equally spaced points $\\{0, s, 2s\\}$ as a function of $a = r_2 s^{r_3}$ and $r_3$, show that it is negative for small enough $a$ exactly when $r_3 > 2$, and explain why $\\{0, 1, 2\\}$ is not enough when $r_2$ is large. Return `(x, c)` from `log3_counterexample(r1, r2, r3)` for `check("21.2", ...)` (the grader tries large $r_2$ too), and confirm with your `cpd_anchor_matrix`. Why does KERPLE clamp $r_3$ to $(0, 2]$ and not only $r_2$ of the power kernel?

**Exercise 21.3** (experiment, ★★★). The committed `kerple_params` runs above show where each head's $r_1, r_2$ stand after that unit's training; the QUICK run moves nothing visibly. *Predict first:* with a longer training (`LENGTHX_FULL=1` trains this chapter's tiny models for 2000 steps; `lengthx reproduce --only kerple_params` takes the main unit's settings), does the power kernel's exponent $r_2$ keep moving the way it moved in the committed runs, settle, or turn back toward 1 (ALiBi)? Train it, read each head's $r_1, r_2$ from the trained PE, and relate the heads' kernels to their perplexity at 4× the training length. Research extension (an open question): read the verdicts of the ledger above on the log kernel against ALiBi and against the power kernel, and the trained kernels per seed. Does the log kernel's shape change growth at all at this scale, and does initialization matter? Train `kerple_log` and `kerple_power` from matched initial kernels (or swap their initial draws) over several seeds and read growth with `compare` from `lengthx.evidence`.""",
"""from lengthx.exercises import check

def cpd_anchor_matrix(K):
    "Exercise 21.1: M_ij = K_ij − K_in − K_jn + K_nn for i, j < n (anchor at the last point) — replace this stub."
    raise NotImplementedError

passed = check("21.1", cpd_anchor_matrix)

def log3_counterexample(r1, r2, r3):
    "Exercise 21.2: points x and sum-zero weights c with cᵀKc < 0 for K = −r1·log(1 + r2|x_i − x_j|^r3), r3 > 2 — replace this stub."
    raise NotImplementedError

passed = check("21.2", log3_counterexample)""")

EX["22_sandwich_fire"] = ("""**Exercise 22.1** (implement, ★, autograded). Write `fire_distance(i, j, c, L)`: FIRE's MLP input $\\psi(i-j)/\\psi(\\max(i, L))$ with $\\psi(x) = \\log(1 + |cx|)$, for query positions `i` and key positions `j` that broadcast. The grader checks the diagonal, the range $[0, 1]$ on causal pairs, the threshold $L$ at the first queries, and the values.

**Exercise 22.2** (derive, ★★). Show that the Sandwich bias $\\sum_{i<\\bar d/2} \\cos(k\\omega_i) - \\bar d/2$ is $\\le 0$, zero at $k = 0$, and that it is *not* monotone in $k$: find with `sandwich_kernel` the first distance at which it increases for $\\bar d = 128$. Using the facts of chapter 21 (a sum of cosines of $x - y$ is a PD kernel), decide whether the Sandwich bias is CPD.

**Exercise 22.3** (experiment, ★★). *Predict first:* at 4× the training length $T$, what range of inputs does FIRE's MLP see for the last query, with $L = T$ and with $L$ close to 0? Plot `fire_normalized_distance` for that query in both cases against the training-time inputs. The input never leaves $[0, 1]$, yet its distribution shifts: which distances get squeezed together, and what does that mean for a bias learned at length $T$?""",
"""from lengthx.exercises import check

def fire_distance(i, j, c, L):
    "Exercise 22.1: ψ(i − j)/ψ(max(i, L)) with ψ(x) = log(1 + |c·x|) — replace this stub."
    raise NotImplementedError

passed = check("22.1", fire_distance)""")

EX["23_randomized"] = ("""**Exercise 23.1** (implement, ★, autograded). Write `randomized_positions(length, max_len, generator)`: `length` distinct positions drawn uniformly without replacement from `range(max_len)`, sorted, from the generator you are given; refuse `length > max_len`. The grader checks order, distinctness and range, that every position is drawn with probability `length / max_len`, reproducibility under the generator, and the error.

**Exercise 23.2** (derive, ★★). For a sequence of length $L$ whose positions are a uniform sorted subset of $\\{0, \\dots, N-1\\}$, show that $P(\\max < M) = \\binom{M}{L}/\\binom{N}{L}$. With $L = 40$ and $N = 2048$, how likely is a training sequence whose largest position is below 500? Which *relative* distances does training see least often, and why does that matter for a relative PE wrapped in randomized positions?

**Exercise 23.3** (experiment, ★★★). *Predict first:* how does `max_len` change perplexity at 4× the training length — equal to the test length, 4× larger, 16× larger? Run this chapter's small experiment with `randomized:max_len=…` for three values and explain the trade-off you see between covering long positions and seeing each position often.""",
"""from lengthx.exercises import check

def randomized_positions(length, max_len, generator):
    "Exercise 23.1: sorted distinct positions, uniform from range(max_len) — replace this stub."
    raise NotImplementedError

passed = check("23.1", randomized_positions)""")

EX["24_learned_relative"] = ("""**Exercise 24.1** (implement, ★★, autograded). Write `clip_bin_mass(weights, k)`: for causal attention weights of shape `[B, H, T, T]` (rows sum to 1, zero above the diagonal, query and key positions $0, \\ldots, T-1$) return the total weight each query puts on each of Shaw's $2k+1$ bins $c_{ij} = \\operatorname{clip}(j-i, -k, k) + k$, shape `[B, H, T, 2k+1]`. Bin 0 is the one vector every key farther than $k$ shares: derive its mass for uniform weights at query $i \\ge k$, $(i - k + 1)/(i + 1)$, and read what it says about a long context under clipping. The grader checks that the bins of a query sum to 1, the uniform-row formula, one-hot weights, and a loop over all pairs.

**Exercise 24.2** (derive, ★★). Fix $W_R$ and write Transformer-XL's position term $(q_i + v)^\\top W_R R_\\delta$ as $\\sum_l A_l \\cos(\\delta\\omega_l - \\phi_l)$, with amplitudes and phases that depend on the query only. Deduce a bound on it that holds at every distance, in terms of $\\|W_R^\\top (q_i + v)\\|$. Compare with Shaw's key term $q_i^\\top w^K_{\\operatorname{clip}(j-i,k)}$: which of the two can tell distance $2T$ from $8T$, and which can tell $T/2$ from $T/2 + 1$ when $k < T/2$?

**Exercise 24.3** (experiment, ★★★). *Predict first:* with a training length of 64, does Shaw's growth at 8× rise or fall as its clipping distance goes from 4 to 16 to 64 (`shaw:clip=4`, `shaw:clip=16`, `shaw:clip=64`)? Train each with this chapter's QUICK setup on two seeds, and give the spread between the seeds before you compare the clips. What does your result say about the paper's argument that clipping lets a model meet sequences longer than it trained on?

**Exercise 24.4** (experiment, ★★). The book's Shaw tables start from a narrower uniform draw than the reference's (the two bounds are printed after `ShawPE`). *Predict first:* does the wider start change Shaw's perplexity at the training length, or its growth at 8×? Re-initialize `w_k` and `w_v` of a fresh `shaw` model layer by layer with `nn.init.xavier_uniform_` on each $[2k+1, d]$ table (the reference's bound), train it and a default one with this chapter's QUICK setup on two seeds each, and compare with the seed spread. If the difference is larger than the spread, which committed Shaw results in this chapter would you expect to move?""",
"""from lengthx.exercises import check

def clip_bin_mass(weights, k):
    "Exercise 24.1: the weight each query puts on each bin clip(j − i, −k, k) + k, [B, H, T, 2k+1] — replace this stub."
    raise NotImplementedError

passed = check("24.1", clip_bin_mass)""")

EX["25_window"] = ("""**Exercise 25.1** (implement, ★, autograded). Write `band_blocks(T, w, block)`: cut $T$ queries and $T$ keys into $n_b = \\lceil T/\\text{block} \\rceil$ blocks and return the bool tensor `[nb, nb]` that is True at (query block, key block) when the causal band $0 \\le i - j < w$ has a pair in it — the blocks a flash kernel must visit; it may skip every other one. The saving the cost section measures is these skipped blocks: show that each query block visits at most $\\lceil (w-1)/\\text{block} \\rceil + 1$ key blocks, so the work grows as $T\\,(w + \\text{block})$ instead of $T^2$. The grader checks that $w \\ge T$ gives the causal lower triangle of blocks, that $w = 1$ gives the diagonal, the count and contiguity of each row, and the blocks where the dense mask has a True.

**Exercise 25.2** (derive, ★★). A row's weight on a key beyond the window is $e^{s_j - \\Lambda - m}/Z$, with $m$ the row's largest logit. If the logits of a row span at most $S$, find the smallest $\\Lambda$ for which these weights are exactly 0 in float32, bfloat16 and float16 (use each format's smallest positive subnormal). How large may $S$ grow before $10^4$ stops being enough? Then say what a fused kernel computes, via $s - \\max s$, for a row whose every logit is $-\\infty$, and why a window with $w \\ge 1$ under a causal mask never produces such a row.

**Exercise 25.3** (experiment, ★★). *Predict first:* for $w = 64$, from which length $T$ on is the band (`WindowPE.attend`) faster than the dense mask, and how does the peak memory of each grow with $T$? Measure with `side_by_side(window_calls(T, w=64))` from `lengthx.bench` at $T = 256, 512, \\ldots, 8192$, and explain the crossover from the work each does: $O(T^2 d)$ for the dense mask, $O(T(w + b)\\,d)$ for the band with blocks of $b$ queries.""",
"""from lengthx.exercises import check

def band_blocks(T, w, block):
    "Exercise 25.1: bool [nb, nb], True where the causal band 0 ≤ i − j < w touches (query block, key block) — replace this stub."
    raise NotImplementedError

passed = check("25.1", band_blocks)""")

EX["30_bipe"] = ("""**Exercise 30.1** (implement, ★, autograded). Write `my_segment_positions(ids, sep_ids)` (the chapter's own is `segment_positions`) returning `(intra, inter)` for `ids` of shape `[B, T]`, with this chapter's convention: a separator belongs to the segment it closes, so $n(t)$ counts separators strictly before $t$, and the token after a separator has intra position 0. The other convention, in which a separator opens the next segment ($n(t) = \\sum_{u\\le t} s_u$, an inclusive sum), is the wrong one here. The grader checks the worked example, rows that start with a separator, runs of separators, rows with none, the prefix property, and random batches.

**Exercise 30.2** (derive, ★★). With $T$ states split into $\\sqrt T$ sets of $\\sqrt T$, compare the embedding sizes of Theorems 3.1 and 3.2 and find the $T$ beyond which BiPE's bound is smaller by a factor 10. Then explain, with a three-segment example, why the segment matrices $A(S)$ can be multiplied in any grouping — the fact the divide-and-conquer construction needs. What does a separator that belonged to the *next* segment (Exercise 30.1's wrong convention) break in this construction?

**Exercise 30.3** (experiment, ★★). *Predict first:* BiPE with natural segments (`bipe:rope`) against fixed-length segments (`bipe:fixed=γ:rope`) for $\\gamma$ much shorter than, close to, and much longer than the corpus's mean segment length. Run the comparison for three values of $\\gamma$ and explain what the fixed segments lose.""",
"""from lengthx.exercises import check

def my_segment_positions(ids, sep_ids):
    "Exercise 30.1: (intra, inter) — separators close their segment — replace this stub."
    raise NotImplementedError

passed = check("30.1", my_segment_positions)""")

EX["40_dape"] = ("""**Exercise 40.1** (implement, ★★, autograded). Write `dape_logits(S, bias, W1, b1, W2, b2)`: equation 3, $S + B + W_2\\,\\mathrm{LeakyReLU}(W_1[S; B] + b_1) + b_2$, where $[S; B]$ stacks all heads' scores and biases on the channel axis (`W1` is $D \\times 2H$, slope 0.01) and the MLP acts at every query–key pair on its own. The grader checks that a future pixel never moves another pixel, that the MLP mixes heads, and the values.

**Exercise 40.2** (derive, ★★). Let the base bias be ALiBi's, $B_h = -m_h|i-j|$. Give weights $W_1, b_1, W_2, b_2$ (with $D = 1$) for which DAPE's logits equal $S + c\\,B$ for a head of your choice and any $c > 0$: DAPE can rescale a slope. Then show that $f$ can never produce a bias that depends on the absolute query position $i$ alone when $S$ and $B$ do not. Why does this keep DAPE a *relative* method?

**Exercise 40.3** (experiment, ★★★). *Predict first:* at 4× the training length, does the learned term $f$ mostly strengthen or weaken the bias at long distances? Use `model.pe.terms(...)` on this chapter's trained model, as in its figure, for a query at the training length and one at 4×, and compare the mean of $f$ by distance. Explain what you see in terms of what the model needs at long distances.""",
"""from lengthx.exercises import check

def dape_logits(S, bias, W1, b1, W2, b2):
    "Exercise 40.1: S + B + W2·LeakyReLU(W1·[S; B] + b1) + b2 at each (i, j) — replace this stub."
    raise NotImplementedError

passed = check("40.1", dape_logits)""")

EX["41_cdape"] = ("""**Exercise 41.1** (implement, ★★, autograded). Write `causal_key_conv(x, weight, bias)`: CDAPE's convolution of score maps `x` `[B, C, T, T]` with 1×k kernels along the key axis (padding $k/2$, so the size stays), applied to the lower-triangular map — every pixel $j > i$ zeroed first. The grader checks that no future pixel reaches a visible output, that rows do not mix, and the values; a convolution without the mask, or with the mask applied after it, leaks.

**Exercise 41.2** (derive, ★★★). Without looking at this chapter's construction: on a score map where query $i$ scores 1 at the key $j$ that matches it and 0 elsewhere, build a single 1×3 kernel that moves the score to key $j + 1$ — where the value of an associative-recall pair sits. Show that it reads only visible pixels when $j + 1 \\le i$, and say what happens at $j + 1 = i + 1$.

**Exercise 41.3** (experiment, ★★). *Predict first:* the sign of $\\Delta P$ (does the model gain from context beyond its training length?) for `kerple_log`, `dape:kerple_log` and `cdape:kerple_log`. Measure it with `delta_p` on this chapter's trained models at 2× and 4× and compare with your prediction.""",
"""from lengthx.exercises import check

def causal_key_conv(x, weight, bias):
    "Exercise 41.1: tril the score map, then a 1×k convolution along keys — replace this stub."
    raise NotImplementedError

passed = check("41.1", causal_key_conv)""")

EX["53_evaluate"] = ("""**Exercise 53.1** (implement, ★, autograded). Write `last_k_windows(n_tokens, length, k, n_windows)` returning the `(start, scored_from)` windows of the last-k protocol: `n_windows` starts spaced evenly from 0 to `n_tokens − length − 1` (rounded), each scoring its last $k$ targets; like the package's `last_k_windows`, raise a `ValueError` when $k$ is longer than the window. The grader checks that every window and its targets fit in the stream, the number scored, the windows themselves, and the refusal.

**Exercise 53.2** (derive, ★★). For a stream of $n$ tokens and window length $L$, count the tokens each protocol scores and the context each scored token has: nonoverlap (mean context $(L-1)/2$), sliding with stride $s$ (at least $L - s$ after the first window), last-k (at least $L - k$). Which protocol's perplexity is lowest for the same model, and by which argument? Why do the protocols disagree most beyond the training length?

**Exercise 53.3** (experiment, ★★). *Predict first:* is NoPE's growth $g_n = P(nL)/P(L)$ larger than RoPE's at 2×, 4× and 16× the training length, and is either above its window yardstick's? Answer from the committed seeds, not from one model: `compare("nope", "rope", "growth", n * L)` and `compare("rope", "window:w=64:rope", "growth", n * L)` from `lengthx.evidence` (chapter 57) give the paired difference over seeds, its 95% interval and a verdict. Then, in the protocol table above (one seed, shown, not ranked), take the ratio $P(4096)/P(2048)$ under `last_k` and under `last_k_common`: why does `last_k` on spread windows, whose targets change with the length, make the longer context look helpful?""",
"""from lengthx.exercises import check

def last_k_windows(n_tokens, length, k=256, n_windows=16):
    "Exercise 53.1: evenly spaced (start, scored_from) windows — replace this stub."
    raise NotImplementedError

passed = check("53.1", last_k_windows)""")

EX["60_che"] = ("""**Exercise 60.1** (implement, ★, autograded). Write `solve_modular_arithmetic(ids)`, the reference solver of the `modular_arithmetic` task: ids 0–4 are digits, 5 is `+`, 6 is `−`, 7 is `*`; return the value mod 5 with the usual precedence. The grader checks hand cases (precedence, left-to-right subtraction), the output range, and agreement with the task's own targets on random inputs.

**Exercise 60.2** (derive, ★★). Give a two-state automaton for `parity_check` and a one-stack machine for `reverse_string`; argue (pumping lemma) why reversal needs the stack and why `duplicate_string` needs more than one. Then consider a NoPE encoder whose attention is uniform: it can compute the fraction of `b`s. Show that parity is not a function of that fraction that one fixed MLP can compute for all lengths. What does that predict for NoPE on parity beyond length 40?

**Exercise 60.3** (experiment, ★★★). *Predict first:* on which tasks do randomized positions (`che_spec(pe, randomized=True)`) help at test lengths 41 to 500, and on which are all PEs at chance anyway? Run `run_che_grid` for three tasks of your choice with two PEs, with and without randomization, and explain the result with the task's level in the hierarchy.""",
"""from lengthx.exercises import check

def solve_modular_arithmetic(ids):
    "Exercise 60.1: the value mod 5 of n op n op … n (ids 0–4 digits, 5 +, 6 −, 7 *) — replace this stub."
    raise NotImplementedError

passed = check("60.1", solve_modular_arithmetic)""")

EX["61_recall_arithmetic"] = ("""**Exercise 61.1** (implement, ★, autograded). Write `mqar_targets(seq, n_keys)`: the next-token targets of multi-query associative recall for one input sequence — at a position holding a key already seen (a query), the value that followed the key's first occurrence; −100 everywhere else, including the first occurrence of each key. The grader checks a hand example and agreement with `Recall.sample` on random layouts.

**Exercise 61.2** (derive, ★★). Show that one causal attention layer with no positional information cannot solve recall by itself: the query can find the matching key by content, but the answer is the token *after* it. Describe a two-layer construction (an induction head): what does the first layer write into each value token, and what does the second layer's query match? Which part of the construction needs position — and how does chapter 41's convolution replace it?

**Exercise 61.3** (experiment, ★★). *Predict first:* recall accuracy at 1×, 2× and 4× the training length for `nope`, `rope`, `alibi` and `cdape:nope`. Run `recall_experiment` (QUICK settings) and explain each PE's curve with your answer to Exercise 61.2.""",
"""from lengthx.exercises import check

def mqar_targets(seq, n_keys):
    "Exercise 61.1: the stored value at each repeated key, −100 elsewhere — replace this stub."
    raise NotImplementedError

passed = check("61.1", mqar_targets)""")


def cell(kind: str, src: str, key: str) -> dict:
    c = {"cell_type": kind, "id": hashlib.sha1(f"exercises:{key}:{kind}".encode()).hexdigest()[:8], "metadata": {},
         "source": src.splitlines(keepends=True)}
    if kind == "code": c.update(execution_count=None, outputs=[])
    return c


def append(stem: str, nbs: Path) -> None:
    p = nbs / f"{stem}.ipynb"
    nb = json.loads(p.read_text())
    cells = nb["cells"]
    start = next((i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Exercises")), len(cells))
    md, code = EX[stem]
    nb["cells"] = cells[:start] + [cell("markdown", "## Exercises\n\n" + INTRO + md, stem), cell("code", code, stem)]
    p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def run_section(stem: str, nbs: Path) -> None:
    "Execute the section's code cells in a fresh shell and store their outputs."
    from execnb.shell import CaptureShell
    p = nbs / f"{stem}.ipynb"
    nb = json.loads(p.read_text())
    start = next(i for i, c in enumerate(nb["cells"]) if "".join(c["source"]).startswith("## Exercises"))
    for c in nb["cells"][start:]:
        if c["cell_type"] == "code": c["outputs"] = [dict(o) for o in CaptureShell().run("".join(c["source"]))]
    p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    for stem in (sys.argv[1:] or EX):
        append(stem, NBS)
        run_section(stem, NBS)
        print("exercises appended and run:", stem)
