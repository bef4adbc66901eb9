# base_ratio.awk - base.sh's table: the median of each row's figures on the old
# and the new side, and new/old. Sections start at a line "-- ...: old ..." or
# "-- ...: new ..."; any other "-- " line ends the section. A row is
# "LABEL  NUMBER UNIT ..." (LABEL has no two spaces running); "p99 NUMBER",
# "duktape NUMBER" or "workers NUMBER" later in the line is a row of its own,
# "LABEL [p99]". Plain POSIX awk (mawk runs it).

function num(t) {
    return t ~ /^-?[0-9]+(\.[0-9]+)?x?[,;)]*$/
}

function add(label, v, unit) {
    if (!(label in seen)) {
        seen[label] = 1
        order[++nrows] = label
        units[label] = unit
    }
    k = label SUBSEP side
    cnt[k]++
    val[k, cnt[k]] = v + 0
}

function median(k,    n, i, j, t, a) {
    n = cnt[k]
    for (i = 1; i <= n; i++)
        a[i] = val[k, i]
    for (i = 2; i <= n; i++)
        for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
        }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}

/^-- / {
    side = ""
    if ($0 ~ /: old/)
        side = "old"
    else if ($0 ~ /: new/)
        side = "new"
    next
}

side != "" && match($0, /[^ ]  +[^ ]/) {
    label = substr($0, 1, RSTART)
    sub(/^ +/, "", label)
    n = split(substr($0, RSTART + 1), tok, / +/)
    first = 0
    for (i = 1; i <= n; i++)
        if (num(tok[i])) {
            first = i
            break
        }
    if (!first)
        next
    u = (first < n && !num(tok[first + 1])) ? tok[first + 1] : ""
    sub(/[,;:)]+$/, "", u)
    if (tok[first] ~ /x/)
        u = "x"
    add(label, tok[first], u)
    # The second figures a row carries (js_bench's "js N ... duktape N",
    # "sbxd N us, workers N us"; bench.c's "p99 N") are rows of their own.
    # The first of each only ("(quiet: p50 .., p99 ..)" is another figure).
    took = ""
    for (i = first + 1; i < n; i++)
        if ((tok[i] == "p99" || tok[i] == "duktape" || tok[i] == "workers") &&
            num(tok[i + 1]) && index(took, " " tok[i] " ") == 0) {
            took = took " " tok[i] " "
            w = (i + 2 <= n && !num(tok[i + 2])) ? tok[i + 2] : u
            sub(/[,;:)]+$/, "", w)
            add(label " [" tok[i] "]", tok[i + 1], w)
        }
}

END {
    printf "%-62s %12s %12s %8s  %s\n", "row", "old", "new", "new/old", "unit (better)"
    for (r = 1; r <= nrows; r++) {
        l = order[r]
        if (!((l SUBSEP "old") in cnt) || !((l SUBSEP "new") in cnt))
            continue
        o = median(l SUBSEP "old")
        w = median(l SUBSEP "new")
        u = units[l]
        better = ""
        if (u ~ /\/s/)
            better = "higher"
        else if (u ~ /^(us|ms|s|kB|MB)$/)
            better = "lower"
        ratio = o != 0 ? sprintf("%.3f", w / o) : "-"
        # A long label keeps its [suffix]: the part before it is cut instead.
        shown = l
        if (length(l) > 62) {
            k = index(l, " [")
            suffix = k ? substr(l, k) : ""
            shown = substr(l, 1, 62 - length(suffix)) suffix
        }
        printf "%-62s %12.4g %12.4g %8s  %s%s (n=%d/%d)\n", shown, o, w, ratio, u,
            better != "" ? " (" better ")" : "", cnt[l SUBSEP "old"], cnt[l SUBSEP "new"]
    }
}
