/*
 * completion.c - sbxctl completion bash|zsh|fish: a completion script for
 * that shell on stdout, made from the verb table (main.c's, read through
 * cli.c), so a new verb is
 * completed without anyone editing a script. Verbs and their long options
 * (read from each verb's usage line), and sandbox ids from `sbxctl ls -q`
 * where a verb takes an ID.
 */
#include <stdio.h>
#include <string.h>

#include "sbxctl.h"

/* Each --option in a usage text, space-separated, once each. */
static void usage_options(const char *usage, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *q = strstr(usage, "--"); q; q = strstr(q + 2, "--")) {
        size_t len = 2;
        while (q[len] && (q[len] == '-' || (q[len] >= 'a' && q[len] <= 'z')))
            len++;
        if (len <= 2)
            continue; /* a bare `--` */
        char word[64];
        snprintf(word, sizeof(word), "%.*s", (int)len, q);
        char padded[70];
        snprintf(padded, sizeof(padded), " %s ", word);
        char hay[1100];
        snprintf(hay, sizeof(hay), " %s ", out);
        if (strstr(hay, padded) || n + len + 2 >= size)
            continue;
        n += (size_t)snprintf(out + n, size - n, "%s%s", n ? " " : "", word);
    }
    size_t l = strlen(out);
    snprintf(out + l, size - l, "%s--help --json", l ? " " : "");
}

static int takes_id(const char *usage)
{
    const char *sp = strchr(usage, ' ');
    return sp && (!strncmp(sp, " ID", 3) || strstr(usage, " ID..."));
}

/*
 * The `case $verb in` arms bash and zsh share: a word starting with '-'
 * completes the verb's options (the line opt_pre OPTS opt_post), else ids
 * where the verb takes one and shell names for `completion`. cur is the
 * shell's current word.
 */
struct verb_arms {
    const char *cur, *opt_pre, *opt_post, *ids, *shells;
};

static void verb_arms(const struct verb_arms *a)
{
    char opts[1024];
    for (int i = 0; i < verb_count(); i++) {
        usage_options(verb_usage(i), opts, sizeof(opts));
        printf("    %s)\n"
               "        if [[ %s == -* ]]; then\n"
               "            %s%s%s\n",
               verb_name(i), a->cur, a->opt_pre, opts, a->opt_post);
        if (takes_id(verb_usage(i)))
            printf("        else\n"
                   "            %s\n",
                   a->ids);
        if (!strcmp(verb_name(i), "completion"))
            printf("        else\n"
                   "            %s\n",
                   a->shells);
        printf("        fi ;;\n");
    }
}

static void bash(void)
{
    printf(
        "# bash completion for sbxctl (sbxctl completion bash)\n"
        "_sbxctl() {\n"
        "    local cur verb i\n"
        "    cur=${COMP_WORDS[COMP_CWORD]}\n"
        "    verb=\n"
        "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
        "        case ${COMP_WORDS[i]} in\n"
        "        -s | --socket | --format) ((i++)) ;;\n"
        "        -*) ;;\n"
        "        *) verb=${COMP_WORDS[i]}; break ;;\n"
        "        esac\n"
        "    done\n"
        "    if [ -z \"$verb\" ]; then\n"
        "        if [[ $cur == -* ]]; then\n"
        "            COMPREPLY=($(compgen -W '--socket --json --format --help --version' "
        "-- \"$cur\"))\n"
        "        else\n"
        "            COMPREPLY=($(compgen -W '");
    for (int i = 0; i < verb_count(); i++)
        printf("%s%s", i ? " " : "", verb_name(i));
    printf("' -- \"$cur\"))\n"
           "        fi\n"
           "        return\n"
           "    fi\n"
           "    case $verb in\n");
    verb_arms(&(struct verb_arms){
        .cur = "$cur",
        .opt_pre = "COMPREPLY=($(compgen -W '",
        .opt_post = "' -- \"$cur\"))",
        .ids = "COMPREPLY=($(compgen -W \"$(sbxctl ls -q 2>/dev/null)\" -- \"$cur\"))",
        .shells = "COMPREPLY=($(compgen -W 'bash zsh fish' -- \"$cur\"))",
    });
    printf("    esac\n"
           "}\n"
           "complete -F _sbxctl sbxctl\n");
}

static void zsh(void)
{
    printf("#compdef sbxctl\n"
           "# zsh completion for sbxctl (sbxctl completion zsh)\n"
           "_sbxctl() {\n"
           "    local -a verbs\n"
           "    verbs=(\n");
    for (int i = 0; i < verb_count(); i++)
        printf("        '%s'\n", verb_name(i));
    printf("    )\n"
           "    local verb=${words[2]}\n"
           "    if (( CURRENT == 2 )); then\n"
           "        compadd -a verbs\n"
           "        compadd -- --socket --json --format --help --version\n"
           "        return\n"
           "    fi\n"
           "    case $verb in\n");
    verb_arms(&(struct verb_arms){
        .cur = "${words[CURRENT]}",
        .opt_pre = "compadd -- ",
        .opt_post = "",
        .ids = "compadd -- ${(f)\"$(sbxctl ls -q 2>/dev/null)\"}",
        .shells = "compadd bash zsh fish",
    });
    printf("    esac\n"
           "}\n"
           "compdef _sbxctl sbxctl\n");
}

static void fish(void)
{
    char opts[1024];
    printf(
        "# fish completion for sbxctl (sbxctl completion fish)\n"
        "complete -c sbxctl -f\n"
        "complete -c sbxctl -n __fish_use_subcommand -s s -l socket -r -d 'sbxd socket'\n"
        "complete -c sbxctl -n __fish_use_subcommand -l json -d 'raw JSON output'\n"
        "complete -c sbxctl -n __fish_use_subcommand -l version -d 'version'\n");
    for (int i = 0; i < verb_count(); i++) {
        char summary[80];
        const char *h = verb_help_text(i);
        size_t n = 0;
        while (h[n] && h[n] != '.' && h[n] != '\n' && n < sizeof(summary) - 1)
            n++;
        snprintf(summary, sizeof(summary), "%.*s", (int)n, h);
        for (char *q = summary; *q; q++)
            if (*q == '\'')
                *q = ' ';
        printf("complete -c sbxctl -n __fish_use_subcommand -a %s -d '%s'\n",
               verb_name(i), summary);
        usage_options(verb_usage(i), opts, sizeof(opts));
        const char *w = opts;
        while (*w) {
            const char *e = strchr(w, ' ');
            size_t len = e ? (size_t)(e - w) : strlen(w);
            printf("complete -c sbxctl -n '__fish_seen_subcommand_from %s' -l %.*s\n",
                   verb_name(i), (int)len - 2, w + 2);
            w += len;
            while (*w == ' ')
                w++;
        }
        if (takes_id(verb_usage(i)))
            printf("complete -c sbxctl -n '__fish_seen_subcommand_from %s' -a "
                   "'(sbxctl ls -q 2>/dev/null)'\n",
                   verb_name(i));
    }
    printf(
        "complete -c sbxctl -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n");
}

int cmd_completion(int argc, char **argv)
{
    struct parser p;
    const char *shell = NULL;
    int o;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (shell)
            usage_error("unexpected argument: %s", p.arg);
        shell = p.arg;
    }
    if (!shell)
        usage_error("missing SHELL (bash, zsh or fish)");
    if (!strcmp(shell, "bash"))
        bash();
    else if (!strcmp(shell, "zsh"))
        zsh();
    else if (!strcmp(shell, "fish"))
        fish();
    else
        usage_error("no completion for '%s': bash, zsh or fish", shell);
    return 0;
}
