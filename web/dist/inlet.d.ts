declare module "core" {
    /** Options of inlet.init. */
    export interface InitOptions {
        /** The gateway's base URL, e.g. "https://t.example.com"; events go to <url>/v1/batch. */
        url: string;
        /** Sent as ?write_key= with every request, when set. */
        writeKey?: string;
        /** Send once this many events are queued (default 20). */
        flushAt?: number;
        /** Send queued events at least this often, in ms (default 5000). */
        flushInterval?: number;
        /** Events kept while they cannot be sent; past it the oldest are dropped (default 1000). */
        maxQueue?: number;
        /** Keep the anonymous id in a first-party cookie instead of localStorage (default false: no cookie is set). */
        cookie?: boolean | {
            domain?: string;
            maxAgeDays?: number;
        };
    }
    /** Props of an event: any JSON object. */
    export type Props = Record<string, unknown>;
    /** One event as sent to the gateway. */
    export interface WireEvent {
        event: string;
        id: string;
        ts: number;
        anon_id: string;
        uid?: string;
        props?: Props;
        context?: Props;
    }
    /** The tracker's API (window.inlet). */
    export interface Inlet {
        /** Configures the tracker; calls before it are queued. */
        init(o: InitOptions): void;
        /** Queues an event; returns its id. */
        track(name: string, props?: Props): string;
        /** Queues a "page_view" event with the page's url, path, title and referrer. */
        page(props?: Props): string;
        /** Sets the user id sent with later events ("" clears it). */
        identify(uid: string): void;
        /** Sends what is queued now; resolves when the attempt is over. */
        flush(): Promise<void>;
        /** The anonymous id of this browser. */
        anonymousId(): string;
        /** Events queued and not yet acknowledged. */
        queued(): number;
    }
    /** What the tracker needs from its host (a browser, or a test). */
    export interface Env {
        now(): number;
        random(n: number): Uint8Array;
        storage?: {
            getItem(k: string): string | null;
            setItem(k: string, v: string): void;
            removeItem(k: string): void;
        };
        fetch?: (url: string, init: {
            method: string;
            body: string;
            keepalive: boolean;
            headers: Record<string, string>;
            credentials: string;
        }) => Promise<{
            status: number;
            headers: {
                get(k: string): string | null;
            };
        }>;
        beacon?: (url: string, body: string) => boolean;
        pixel?: (url: string) => void;
        setTimeout(f: () => void, ms: number): unknown;
        clearTimeout(t: unknown): void;
        online?(): boolean;
        cookie?: {
            get(): string;
            set(c: string): void;
        };
        location?: {
            href: string;
            pathname: string;
            title: string;
            referrer: string;
        };
    }
    /** uuidv7 is an RFC 9562 version 7 UUID: 48 bits of ms time, then random. */
    export function uuidv7(now: number, rnd: Uint8Array): string;
    /** backoff is the wait before retry n (0-based): 1 s doubling to 60 s, with ±25% jitter, at least Retry-After. */
    export function backoff(n: number, retryAfterS: number | null, jitter: number): number;
    /** b64url encodes a string's UTF-8 bytes as unpadded base64url. */
    export function b64url(s: string): string;
    /** createInlet returns a tracker bound to env. */
    export function createInlet(env: Env): Inlet;
}
declare module "index" {
    import { type Inlet } from "core";
    export type { InitOptions, Inlet, Props, WireEvent } from "core";
    global {
        interface Window {
            inlet: Inlet;
        }
    }
}
