/*
 * tar.h - tar streams (ustar with PAX and GNU long names), made from a path
 * and extracted into a directory without leaving it. sbx-init serves
 * fs.read/fs.write `format: "tar"` with them (proto/CHANNEL.md "Files",
 * tar_get/tar_put); sbxctl cp makes and extracts the local side with the
 * same code. libc only: no allocator or logger of either program.
 *
 * Extraction treats the archive as hostile: an entry's name is relative
 * (absolute names and `..` components are refused), every directory on the
 * way is opened with O_NOFOLLOW (a symlink in the way, one the archive made
 * or one that was there, is refused), files are created with O_EXCL after
 * whatever was at their name is unlinked, and metadata records are bounded.
 * Entries are made as the calling process (their uid/gid in the archive are
 * ignored), so files belong to whoever extracts.
 */
#ifndef SBX_TAR_H
#define SBX_TAR_H

#include <stddef.h>
#include <stdint.h>

#define TAR_NAME_MAX 4096        /* bytes of an entry's name or link target */
#define TAR_META_MAX (64u << 10) /* a PAX or GNU long-name record's data */
#define TAR_DEPTH_MAX 256        /* directory levels made or walked */
#define TAR_DEFER_MAX 4096       /* directories whose mode or mtime is set at the end */

/* ---- making an archive ---------------------------------------------------- */

struct tar_out;

/* An archive of path (a file, directory, symlink, fifo), its top entry named
 * name (e.g. path's base name; "." for "the contents"). follow: path itself
 * is stat'ed through a symlink (docker cp -L); links below it never are.
 * NULL with errno. */
struct tar_out *tar_out_new(const char *path, const char *name, int follow);
/* The next bytes of the archive: n > 0, 0 at its end (after the two zero
 * blocks), -1 with errno when it cannot go on (tar_out_message says what). */
long tar_out_read(struct tar_out *t, void *buf, size_t cap);
/* The archive's exact size, by the same walk without reading file data (so
 * a raw upload can announce it); -1 with errno. A file that changes size
 * between this and the real read changes it. */
int64_t tar_out_size(const char *path, const char *name, int follow);
const char *tar_out_message(const struct tar_out *t);
uint64_t tar_out_entries(const struct tar_out *t);
void tar_out_free(struct tar_out *t);

/* ---- extracting one -------------------------------------------------------- */

struct tar_in;

/* Extracts into the directory dirfd (taken over: closed by tar_in_free).
 * top: when not NULL, every entry's first name component is replaced by it
 * ("" drops it: the contents go straight into dirfd). NULL on OOM. */
struct tar_in *tar_in_new(int dirfd, const char *top);
/* The next n bytes of the archive. 0, or -1 once it is refused or failed
 * (tar_in_errno, tar_in_message); later calls fail the same way. */
int tar_in_feed(struct tar_in *t, const void *data, size_t n);
/* The archive is over: 0 if it ended where an entry may end (its end
 * blocks, or none), else -1 (cut inside an entry). Sets deferred modes. */
int tar_in_finish(struct tar_in *t);
/* on: entries take the uid/gid the archive gives them (sbxctl cp -a; needs
 * the privilege to chown), failing the extraction where that is refused. */
void tar_in_set_owners(struct tar_in *t, int on);
int tar_in_errno(const struct tar_in *t);
const char *tar_in_message(const struct tar_in *t);
uint64_t tar_in_entries(const struct tar_in *t);
uint64_t tar_in_skipped(const struct tar_in *t); /* devices, sockets, unknown types */
void tar_in_free(struct tar_in *t);

#endif
