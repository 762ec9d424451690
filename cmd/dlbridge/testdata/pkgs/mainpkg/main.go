// Command mainpkg is a main package, which dlbridge build cannot link.
package main

func main() {}
