// Types of the package entry point (lowcopy.js): the native API of index.d.ts, with
// `[Symbol.dispose]` on the objects that hold a descriptor (`using p = new Peeker(sock)`).
export * from './index'

declare module './index' {
  interface Peeker { [Symbol.dispose](): void }
  interface ZeroCopySender { [Symbol.dispose](): void }
  interface ZeroCopyReceiver { [Symbol.dispose](): void }
  interface Receiver { [Symbol.dispose](): void }
}
