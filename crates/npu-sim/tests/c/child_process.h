/* Shared by the C test programs that run a second process (an IPC importer): the program
 * starts itself again with posix_spawn, its stdin and stdout joined to the parent by pipes,
 * and the two exchange lines. Every read is bounded, so a child that never answers fails the
 * program instead of hanging it. Define _GNU_SOURCE before any include. */
#ifndef NPUSIM_TEST_CHILD_PROCESS_H
#define NPUSIM_TEST_CHILD_PROCESS_H

#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

extern char **environ;

/* Reads one line (at most cap-1 bytes) from fd, waiting at most 60 s for each byte. */
static int read_line(int fd, char *line, size_t cap)
{
    size_t len = 0;
    while (len + 1 < cap) {
        struct pollfd ready = {fd, POLLIN, 0};
        if (poll(&ready, 1, 60000) != 1 || read(fd, &line[len], 1) != 1) {
            return -1;
        }
        if (line[len] == '\n') {
            break;
        }
        len++;
    }
    line[len] = '\0';
    return 0;
}

static int write_line(int fd, const char *line)
{
    size_t len = strlen(line);
    return write(fd, line, len) == (ssize_t)len && write(fd, "\n", 1) == 1 ? 0 : -1;
}

/* A child running this program with `argv`: its pid, the end of the pipe to its stdin
 * (`to_child`) and the end of the pipe from its stdout (`from_child`). */
struct child {
    pid_t pid;
    int to_child;
    int from_child;
};

/* Starts this program again with `argv` (argv[0] included, NULL-terminated); 0 on success. */
static int spawn_self(char *const argv[], struct child *child)
{
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) {
        return -1;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    int spawned = posix_spawn(&child->pid, "/proc/self/exe", &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (spawned != 0) {
        close(to_child[1]);
        close(from_child[0]);
        return -1;
    }
    child->to_child = to_child[1];
    child->from_child = from_child[0];
    return 0;
}

#endif /* NPUSIM_TEST_CHILD_PROCESS_H */
