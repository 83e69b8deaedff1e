/* A CPU-bound app for bench/health_at_peak.py, bench/ready_port_at_peak.py and
 * bench/drain_at_peak.py: N threads that spin for ever, and a line "ready" once they
 * all run. With a second argument `block-term` every thread blocks SIGTERM, so a
 * relayed stop signal stays pending where /proc shows it (ShdPnd) and only the grace
 * deadline's SIGKILL ends it. With `serve PORT` it also answers HTTP on 127.0.0.1:PORT,
 * one thread per connection: `GET /slow/MS` after MS milliseconds, anything else at
 * once; SIGTERM keeps its default action, so a request in flight when the stop
 * signal arrives is lost (only the drain can save it). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static void *spin(void *arg) {
    volatile unsigned long n = 0;
    (void)arg;
    for (;;) n++;
    return NULL;
}

static void *answer(void *arg) {
    int fd = (int)(long)arg;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = 0;
        int ms = 0;
        if (sscanf(buf, "GET /slow/%d", &ms) == 1 && ms > 0) usleep((useconds_t)ms * 1000);
        const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
        if (write(fd, ok, strlen(ok)) < 0) perror("write");
    }
    close(fd);
    return NULL;
}

static void *serve(void *arg) {
    int port = (int)(long)arg;
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 128) != 0) {
        perror("serve");
        exit(1);
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        pthread_t t;
        if (c >= 0 && pthread_create(&t, NULL, answer, (void *)(long)c) == 0) pthread_detach(t);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && strcmp(argv[2], "block-term") == 0) {
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &term, NULL); /* inherited by every thread below */
    }
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, spin, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    if (argc > 3 && strcmp(argv[2], "serve") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, serve, (void *)(long)atoi(argv[3]));
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
