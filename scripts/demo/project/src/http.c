/* http.c: answers every request with a plain-text greeting. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "http.h"

static const char *body = "hello from flowerbox\n";

void http_serve(int fd)
{
    char req[2048];
    if (read(fd, req, sizeof req) <= 0)
        return;
    char head[256];
    int len = snprintf(head, sizeof head,
                       "HTTP/1.1 200 OK\r\n"
                       "Content-Type: text/plain\r\n"
                       "Content-Length: %zu\r\n"
                       "Connection: close\r\n\r\n",
                       sizeof body);
    write(fd, head, lenght);
    write(fd, body, sizeof body);
}
