/*
 * dinfer's self-extracting launcher. The release file is this program followed by a payload and a trailer:
 *
 *   [launcher ELF][payload: one gzip stream of entries][trailer: 64 bytes]
 *
 * trailer: "DINFERPK" (8 bytes), payload offset (u64 LE), payload size (u64 LE), entry count (u64 LE),
 *          id (32 bytes: ASCII, NUL-padded; the cache folder's name, derived from the payload's SHA-256)
 * entry:   type (u8: 'd' directory, 'f' file, 'l' symbolic link), mode (u32 LE), path length (u32 LE),
 *          data length (u64 LE), path (relative, '/'-separated), data (file contents or link target)
 *
 * On first run the payload is unpacked into a temporary folder beside the cache folder, checked (gzip's
 * CRC-32 and length, the entry count, nothing after the stream), marked complete and renamed into place in
 * one step, so a half-unpacked copy is never run. Later runs find the folder and start at once. The program
 * then replaces itself with the carried Deno running the carried dinfer. Needs only glibc (zlib is linked in
 * statically).
 *
 * Cache folder: $DINFER_CACHE_DIR, else $XDG_CACHE_HOME/dinfer, else $HOME/.cache/dinfer; then <id>/.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define TRAILER_SIZE 64
#define MAGIC "DINFERPK"
#define STAMP ".dinfer-complete"

static const char *self_path = "dinfer";

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dinfer: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(127);
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The payload as a stream of inflated bytes, reading at most `left` compressed bytes from `fd`. */
struct reader {
  int fd;
  uint64_t left;
  z_stream z;
  unsigned char in[1 << 16];
  int ended;
};

/* Reads exactly n inflated bytes into buf; returns 0, or -1 with a reason in *why. */
static int read_exact(struct reader *r, void *buf, size_t n, const char **why) {
  r->z.next_out = buf;
  r->z.avail_out = (uInt)n;
  while (r->z.avail_out > 0) {
    if (r->ended) {
      *why = "the payload ends early";
      return -1;
    }
    if (r->z.avail_in == 0 && r->left > 0) {
      size_t want = r->left < sizeof r->in ? (size_t)r->left : sizeof r->in;
      ssize_t got = read(r->fd, r->in, want);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        *why = got < 0 ? strerror(errno) : "the file is truncated";
        return -1;
      }
      r->left -= (uint64_t)got;
      r->z.next_in = r->in;
      r->z.avail_in = (uInt)got;
    }
    int rc = inflate(&r->z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      r->ended = 1;
    } else if (rc == Z_BUF_ERROR && r->z.avail_in == 0 && r->left == 0) {
      *why = "the payload ends early";
      return -1;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      *why = r->z.msg ? r->z.msg : "corrupt payload";
      return -1;
    }
  }
  return 0;
}

/* Copies n inflated bytes to fd; -1: the payload is unreadable, -2: fd is not writable. */
static int copy_to(struct reader *r, int fd, uint64_t n, const char **why) {
  static unsigned char buf[1 << 16];
  while (n > 0) {
    size_t k = n < sizeof buf ? (size_t)n : sizeof buf;
    if (read_exact(r, buf, k, why) < 0) return -1;
    for (size_t off = 0; off < k;) {
      ssize_t w = write(fd, buf + off, k - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        *why = strerror(errno);
        return -2;
      }
      off += (size_t)w;
    }
    n -= k;
  }
  return 0;
}

/* A path from the payload is relative, without empty, "." or ".." components. */
static int safe_path(const char *p) {
  if (p[0] == '\0' || p[0] == '/') return 0;
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) return 0;
    s += len;
    if (*s == '/') s++;
    else break;
  }
  return p[strlen(p) - 1] != '/';
}

/* A link target stays inside the tree: relative, and never climbs above the root from the link's folder. */
static int safe_link(const char *path, const char *target) {
  if (target[0] == '\0' || target[0] == '/') return 0;
  int depth = 0;
  for (const char *s = path; *s; s++)
    if (*s == '/') depth++;
  for (const char *s = target; *s;) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 2 && s[0] == '.' && s[1] == '.') depth--;
    else if (len > 0 && !(len == 1 && s[0] == '.')) depth++;
    if (depth < 0) return 0;
    s += len;
    if (*s == '/') s++;
  }
  return 1;
}

/* out = a + "/" + b; exits when the result does not fit. */
static void join(char *out, size_t len, const char *a, const char *b) {
  if (snprintf(out, len, "%s/%s", a, b) >= (int)len) die("Cannot use '%s/%s': path too long", a, b);
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(p);
  return 0;
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 32, FTW_DEPTH | FTW_PHYS); }

static int mkdirs(const char *path, mode_t mode) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *s = buf + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(buf, mode) < 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  return mkdir(buf, mode) < 0 && errno != EEXIST ? -1 : 0;
}

/* Unpacks the payload into dir (which exists and is empty); returns 0, or -1 with a reason in why. */
static int unpack(int fd, uint64_t offset, uint64_t size, uint64_t count, const char *dir, char *why,
                  size_t whylen) {
  static struct reader r;
  const char *reason = NULL;
  char path[PATH_MAX], full[PATH_MAX], target[PATH_MAX];
  memset(&r, 0, sizeof r);
  r.fd = fd;
  r.left = size;
  if (lseek(fd, (off_t)offset, SEEK_SET) < 0 || inflateInit2(&r.z, 16 + MAX_WBITS) != Z_OK) {
    snprintf(why, whylen, "cannot read the payload");
    return -1;
  }
  int rc = -1;
  for (uint64_t i = 0; i < count; i++) {
    unsigned char h[17];
    if (read_exact(&r, h, sizeof h, &reason) < 0) goto out;
    char type = (char)h[0];
    uint32_t mode = le32(h + 1) & 07777, plen = le32(h + 5);
    uint64_t dlen = le64(h + 9);
    if (plen == 0 || plen >= sizeof path) {
      reason = "an entry's path is too long";
      goto out;
    }
    if (read_exact(&r, path, plen, &reason) < 0) goto out;
    path[plen] = '\0';
    if (!safe_path(path) || strlen(path) != plen) {
      snprintf(why, whylen, "entry '%s' is not a relative path inside the release", path);
      goto out_why;
    }
    if (snprintf(full, sizeof full, "%s/%s", dir, path) >= (int)sizeof full) {
      snprintf(why, whylen, "entry '%s' makes a path longer than %d bytes", path, PATH_MAX - 1);
      goto out_why;
    }
    if (type == 'd') {
      if (dlen != 0 || mkdirs(full, 0755) < 0) {
        snprintf(why, whylen, "cannot create folder '%s': %s", full, dlen ? "bad entry" : strerror(errno));
        goto out_why;
      }
      chmod(full, mode | 0700);
    } else if (type == 'f') {
      int out = open(full, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode | 0600);
      if (out < 0) {
        snprintf(why, whylen, "cannot create '%s': %s", full, strerror(errno));
        goto out_why;
      }
      int c = copy_to(&r, out, dlen, &reason);
      if (close(out) < 0 && c == 0) {
        reason = strerror(errno);
        c = -2;
      }
      if (c == -2) {
        snprintf(why, whylen, "cannot write '%s': %s", full, reason);
        goto out_why;
      }
      if (c < 0) goto out;
    } else if (type == 'l') {
      if (dlen == 0 || dlen >= sizeof target) {
        reason = "a link target is too long";
        goto out;
      }
      if (read_exact(&r, target, (size_t)dlen, &reason) < 0) goto out;
      target[dlen] = '\0';
      if (!safe_link(path, target) || strlen(target) != dlen) {
        snprintf(why, whylen, "link '%s' points outside the release ('%s')", path, target);
        goto out_why;
      }
      if (symlink(target, full) < 0) {
        snprintf(why, whylen, "cannot create link '%s': %s", full, strerror(errno));
        goto out_why;
      }
    } else {
      reason = "unknown entry type";
      goto out;
    }
  }
  /* Everything promised is there; the stream must end here (this checks gzip's CRC-32 and length) and
   * nothing may follow it. */
  unsigned char extra;
  if (read_exact(&r, &extra, 1, &reason) == 0) {
    reason = "the payload holds more entries than its trailer says";
    goto out;
  }
  if (!r.ended || r.z.avail_in != 0 || r.left != 0) {
    reason = r.ended ? "data follows the payload" : "the payload ends early";
    goto out;
  }
  rc = 0;
out:
  /* Whatever went wrong here (zlib's complaint, a garbled entry, a stream too short or too long), the
   * payload differs from what was built. */
  if (rc < 0) snprintf(why, whylen, "the payload is damaged (%s)", reason ? reason : "unreadable");
out_why:
  inflateEnd(&r.z);
  return rc;
}

static void cache_root(char *out, size_t len) {
  const char *v = getenv("DINFER_CACHE_DIR");
  if (v && *v) {
    snprintf(out, len, "%s", v);
    return;
  }
  v = getenv("XDG_CACHE_HOME");
  if (v && v[0] == '/') {
    snprintf(out, len, "%s/dinfer", v);
    return;
  }
  v = getenv("HOME");
  if (!v || !*v) die("Cannot choose a cache folder: neither DINFER_CACHE_DIR, XDG_CACHE_HOME nor HOME is set");
  snprintf(out, len, "%s/.cache/dinfer", v);
}

static int complete(const char *dir, const char *id) {
  char stamp[PATH_MAX], buf[64] = {0};
  join(stamp, sizeof stamp, dir, STAMP);
  int fd = open(stamp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 && strncmp(buf, id, strlen(id)) == 0 && buf[strlen(id)] == '\n';
}

int main(int argc, char **argv) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) die("Cannot find the release file: /proc/self/exe: %s", strerror(errno));
  exe[n] = '\0';
  self_path = exe;

  int fd = open(exe, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("Cannot open '%s': %s", exe, strerror(errno));
  struct stat st;
  unsigned char t[TRAILER_SIZE];
  if (fstat(fd, &st) < 0 || st.st_size < TRAILER_SIZE ||
      pread(fd, t, TRAILER_SIZE, st.st_size - TRAILER_SIZE) != TRAILER_SIZE || memcmp(t, MAGIC, 8) != 0)
    die("Cannot start '%s': it carries no dinfer payload", exe);
  uint64_t offset = le64(t + 8), size = le64(t + 16), count = le64(t + 24);
  char id[33] = {0};
  memcpy(id, t + 32, 32);
  if (offset + size + TRAILER_SIZE != (uint64_t)st.st_size || !safe_path(id) || strchr(id, '/'))
    die("Cannot start '%s': its trailer does not match the file (truncated or modified)", exe);

  char root[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX], why[PATH_MAX + 256];
  cache_root(root, sizeof root);
  join(dir, sizeof dir, root, id);

  if (!complete(dir, id)) {
    if (mkdirs(root, 0700) < 0) die("Cannot create cache folder '%s': %s", root, strerror(errno));
    char name[64];
    snprintf(name, sizeof name, ".unpacking-%s-XXXXXX", id);
    join(tmp, sizeof tmp, root, name);
    if (!mkdtemp(tmp)) die("Cannot create a folder in '%s': %s", root, strerror(errno));
    if (unpack(fd, offset, size, count, tmp, why, sizeof why) < 0) {
      remove_tree(tmp);
      die("Cannot unpack '%s' into '%s': %s", exe, root, why);
    }
    char stamp[PATH_MAX];
    join(stamp, sizeof stamp, tmp, STAMP);
    FILE *f = fopen(stamp, "we");
    if (!f || fprintf(f, "%s\n", id) < 0 || fclose(f) != 0) {
      remove_tree(tmp);
      die("Cannot write '%s': %s", stamp, strerror(errno));
    }
    /* The stamp and the files reach the disk before the rename makes them the copy that runs. */
    int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd >= 0) {
      syncfs(tfd);
      close(tfd);
    }
    if (rename(tmp, dir) < 0) {
      int err = errno;
      remove_tree(tmp);
      /* Another start unpacked the same release first: use that copy. */
      if (!complete(dir, id)) die("Cannot move '%s' to '%s': %s", tmp, dir, strerror(err));
    }
  }
  close(fd);

  /* deno run [permissions] <dir>/app/main.ts <arguments> */
  char deno[PATH_MAX], main_ts[PATH_MAX], deno_dir[PATH_MAX];
  join(deno, sizeof deno, dir, "deno");
  join(main_ts, sizeof main_ts, dir, "app/main.ts");
  join(deno_dir, sizeof deno_dir, dir, "deno_dir");
  setenv("DENO_DIR", deno_dir, 1);
  setenv("DENO_NO_UPDATE_CHECK", "1", 1);
  setenv("DENO_NO_PROMPT", "1", 1);
  static const char *fixed[] = {"run",          "--quiet",       "--cached-only",  "--frozen",
                                "--allow-net",  "--allow-read",  "--allow-write",  "--allow-env",
                                "--allow-sys",  "--allow-ffi",   "--allow-run"};
  size_t nfixed = sizeof fixed / sizeof fixed[0];
  char **args = calloc(nfixed + (size_t)argc + 3, sizeof(char *));
  if (!args) die("Cannot start: out of memory");
  size_t k = 0;
  args[k++] = deno;
  for (size_t i = 0; i < nfixed; i++) args[k++] = (char *)fixed[i];
  args[k++] = main_ts;
  for (int i = 1; i < argc; i++) args[k++] = argv[i];
  args[k] = NULL;
  execv(deno, args);
  die("Cannot start '%s': %s", deno, strerror(errno));
}
