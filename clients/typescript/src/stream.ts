// The queue between the connection, which pushes what it receives, and
// the user, who pulls with for await. It holds what has been received and
// not yet taken, so the connection never waits for the user.

/**
 * An unbounded queue read as an async iterator. end() lets the reader
 * take what is queued, then finishes it: done, or rejected with the error
 * given.
 */
export class Stream<T> {
  private items: T[] = [];
  private head = 0;
  private readers: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void }[] = [];
  private ended: { error: unknown } | undefined;

  /** Queues item, or hands it to a waiting reader. */
  push(item: T): void {
    if (this.ended) return;
    const reader = this.readers.shift();
    if (reader) reader.resolve({ value: item, done: false });
    else this.items.push(item);
  }

  /** Ends the stream, with error (undefined: done) once the queue is taken. */
  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = { error };
    for (const reader of this.readers.splice(0)) {
      if (error === undefined) reader.resolve({ value: undefined, done: true });
      else reader.reject(error);
    }
  }

  /** How many items wait to be taken. */
  get size(): number {
    return this.items.length - this.head;
  }

  /** The next item, waiting for it when the queue is empty. */
  next(): Promise<IteratorResult<T>> {
    if (this.head < this.items.length) {
      const value = this.items[this.head] as T;
      this.items[this.head] = undefined as T; // let it be collected
      this.head++;
      if (this.head > 1024 && this.head * 2 > this.items.length) {
        this.items = this.items.slice(this.head);
        this.head = 0;
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.ended) {
      if (this.ended.error === undefined) return Promise.resolve({ value: undefined, done: true });
      return Promise.reject(this.ended.error);
    }
    return new Promise((resolve, reject) => this.readers.push({ resolve, reject }));
  }
}
