/* http.h: the request handler of httpd. */
#ifndef HTTP_H
#define HTTP_H

/* Reads one request from the connected socket fd and writes the response. */
void http_serve(int fd);

#endif
