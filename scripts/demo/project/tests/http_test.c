/* http_test.c: http_serve() answers one request with the whole greeting, byte for byte.
 * Build and run it out of the tree:
 *   cc -Wall -Isrc -o /tmp/http_test tests/http_test.c src/http.c && /tmp/http_test */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"

static const char *want = "HTTP/1.1 200 OK\r\n"
                          "Content-Type: text/plain\r\n"
                          "Content-Length: 21\r\n"
                          "Connection: close\r\n\r\n"
                          "hello from flowerbox\n";

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        perror("socketpair");
        return 2;
    }
    const char *req = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    if (write(sv[1], req, strlen(req)) < 0) {
        perror("write");
        return 2;
    }
    http_serve(sv[0]);
    close(sv[0]);
    char got[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof got - 1 && (r = read(sv[1], got + n, sizeof got - 1 - n)) > 0)
        n += (size_t)r;
    got[n] = '\0';
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "http_test: http_serve answered %zu bytes:\n%s\n-- want:\n%s", n, got, want);
        return 1;
    }
    puts("http_test: ok");
    return 0;
}
