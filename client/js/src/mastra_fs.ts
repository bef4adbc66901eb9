/*
 * mastra_fs.ts - SbxdFilesystem: Mastra's WorkspaceFilesystem on sbxd's fs.*
 * (proto/PROTOCOL.md "Files"), so that a Workspace's file tools (read, write,
 * edit, list, grep) act inside an sbxd sandbox. Semantics follow Mastra's
 * LocalFilesystem: paths are relative to basePath (default the sandbox's
 * /workspace; a leading "/" is basePath's root and nothing outside it is
 * reachable), errors are Mastra's FilesystemError kinds.
 */
import * as posix from 'node:path/posix';
import {
    DirectoryNotEmptyError,
    DirectoryNotFoundError,
    FileExistsError,
    FileNotFoundError,
    IsDirectoryError,
    MastraFilesystem,
    NotDirectoryError,
    PermissionError,
    StaleFileError,
} from '@mastra/core/workspace';
import type {
    CopyOptions,
    FileContent,
    FileEntry,
    FileStat,
    ListOptions,
    MastraFilesystemOptions,
    ProviderStatus,
    ReadOptions,
    RemoveOptions,
    WriteOptions,
} from '@mastra/core/workspace';
import { SbxdClient } from './client.js';
import { SbxdError } from './errors.js';
import type { SbxdFiles } from './files.js';

export interface SbxdFilesystemOptions extends MastraFilesystemOptions {
    /** The sbxd sandbox id (a started SbxdSandbox's id). */
    sandbox: string;
    client?: SbxdClient;
    socketPath?: string;
    /** Root of this filesystem inside the sandbox (default /workspace). */
    basePath?: string;
    readOnly?: boolean;
    id?: string;
}

function errnoOf(e: unknown): string | undefined {
    return e instanceof SbxdError && e.code === -32010 ? ((e.data as { errno?: string }).errno ?? undefined) : undefined;
}

export class SbxdFilesystem extends MastraFilesystem {
    readonly id: string;
    readonly name = 'SbxdFilesystem';
    readonly provider = 'sbxd';
    status: ProviderStatus = 'pending';
    readonly basePath: string;
    readonly readOnly: boolean;
    readonly client: SbxdClient;
    private readonly fsx: SbxdFiles;

    constructor(options: SbxdFilesystemOptions) {
        super({ ...options, name: 'SbxdFilesystem' });
        this.id = options.id ?? `sbxd-fs-${options.sandbox}`;
        this.basePath = posix.normalize(options.basePath ?? '/workspace');
        this.readOnly = options.readOnly ?? false;
        this.client = options.client ?? new SbxdClient(options.socketPath ? { socketPath: options.socketPath } : {});
        this.fsx = this.client.files(options.sandbox);
    }

    /** The sandbox path of a workspace path; PermissionError outside basePath. */
    resolveAbsolutePath(p: string): string {
        const abs = posix.join(this.basePath, p);
        if (abs !== this.basePath && !abs.startsWith(this.basePath === '/' ? '/' : this.basePath + '/'))
            throw new PermissionError(p, 'access (outside the filesystem)');
        return abs;
    }

    private writable(op: string): void {
        if (this.readOnly) throw new PermissionError(this.basePath, `${op} (read-only filesystem)`);
    }

    private async info(p: string): Promise<{ type: string } | null> {
        try {
            return await this.client.call('fs.stat', { sandbox: this.fsx.sandbox, path: this.resolveAbsolutePath(p) });
        } catch (e) {
            if (errnoOf(e) === 'ENOENT' || errnoOf(e) === 'ENOTDIR') return null;
            throw e;
        }
    }

    override async readFile(p: string, options?: ReadOptions): Promise<string | Buffer> {
        await this.ensureReady();
        const st = await this.info(p);
        if (!st) throw new FileNotFoundError(p);
        if (st.type === 'dir') throw new IsDirectoryError(p);
        const bytes = Buffer.from(await this.fsx.read(this.resolveAbsolutePath(p), { format: 'bytes' }));
        return options?.encoding ? bytes.toString(options.encoding) : bytes;
    }

    override async writeFile(p: string, content: FileContent, options?: WriteOptions): Promise<void> {
        await this.ensureReady();
        this.writable('writeFile');
        const abs = this.resolveAbsolutePath(p);
        if (options?.recursive === false) {
            const dir = await this.info(posix.dirname(p));
            if (!dir) throw new DirectoryNotFoundError(posix.dirname(p));
            if (dir.type !== 'dir') throw new NotDirectoryError(posix.dirname(p));
        }
        const cur = (await this.info(p)) as { type: string; mtime?: string } | null;
        if (cur && options?.overwrite === false) throw new FileExistsError(p);
        if (cur?.type === 'dir') throw new IsDirectoryError(p);
        if (cur && options?.expectedMtime && cur.mtime && new Date(cur.mtime).getTime() !== options.expectedMtime.getTime())
            throw new StaleFileError(p, options.expectedMtime, new Date(cur.mtime));
        await this.fsx.write(abs, typeof content === 'string' ? content : new Uint8Array(content));
    }

    override async appendFile(p: string, content: FileContent): Promise<void> {
        await this.ensureReady();
        this.writable('appendFile');
        const data = typeof content === 'string' ? Buffer.from(content) : Buffer.from(content);
        await this.client.call('fs.write', {
            sandbox: this.fsx.sandbox,
            path: this.resolveAbsolutePath(p),
            data_b64: data.toString('base64'),
            append: true,
            mkdir_parents: true,
        });
    }

    override async deleteFile(p: string, options?: RemoveOptions): Promise<void> {
        await this.ensureReady();
        this.writable('deleteFile');
        const st = await this.info(p);
        if (!st) {
            if (options?.force) return;
            throw new FileNotFoundError(p);
        }
        if (st.type === 'dir') throw new IsDirectoryError(p);
        await this.client.call('fs.remove', { sandbox: this.fsx.sandbox, path: this.resolveAbsolutePath(p) });
    }

    override async copyFile(src: string, dest: string, options?: CopyOptions): Promise<void> {
        await this.ensureReady();
        this.writable('copyFile');
        const st = await this.info(src);
        if (!st) throw new FileNotFoundError(src);
        if (st.type === 'dir') {
            if (!options?.recursive) throw new IsDirectoryError(src);
            await this.mkdir(dest, { recursive: true });
            for (const e of await this.readdir(src))
                await this.copyFile(posix.join(src, e.name), posix.join(dest, e.name), options).catch((err) => {
                    if (!(err instanceof FileExistsError && options?.overwrite === false)) throw err;
                });
            return;
        }
        if (options?.overwrite === false && (await this.info(dest))) throw new FileExistsError(dest);
        const bytes = await this.fsx.read(this.resolveAbsolutePath(src), { format: 'bytes' });
        await this.fsx.write(this.resolveAbsolutePath(dest), bytes);
    }

    override async moveFile(src: string, dest: string, options?: CopyOptions): Promise<void> {
        await this.ensureReady();
        this.writable('moveFile');
        if (!(await this.info(src))) throw new FileNotFoundError(src);
        await this.client.call('fs.mkdir', {
            sandbox: this.fsx.sandbox,
            path: this.resolveAbsolutePath(posix.dirname(dest)),
            parents: true,
        });
        try {
            await this.client.call('fs.rename', {
                sandbox: this.fsx.sandbox,
                path: this.resolveAbsolutePath(src),
                to: this.resolveAbsolutePath(dest),
                overwrite: options?.overwrite !== false,
            });
        } catch (e) {
            if (errnoOf(e) === 'EEXIST') throw new FileExistsError(dest);
            if (errnoOf(e) !== 'EXDEV') throw e;
            await this.copyFile(src, dest, { ...options, recursive: true });
            await this.client.call('fs.remove', { sandbox: this.fsx.sandbox, path: this.resolveAbsolutePath(src), recursive: true });
        }
    }

    override async mkdir(p: string, options?: { recursive?: boolean }): Promise<void> {
        await this.ensureReady();
        this.writable('mkdir');
        try {
            await this.client.call('fs.mkdir', {
                sandbox: this.fsx.sandbox,
                path: this.resolveAbsolutePath(p),
                parents: options?.recursive ?? true,
            });
        } catch (e) {
            const en = errnoOf(e);
            if (en === 'EEXIST') {
                if ((await this.info(p))?.type !== 'dir') throw new FileExistsError(p);
            } else if (en === 'ENOENT') throw new DirectoryNotFoundError(posix.dirname(p));
            else if (en === 'ENOTDIR') throw new FileExistsError(p);
            else throw e;
        }
    }

    override async rmdir(p: string, options?: RemoveOptions): Promise<void> {
        await this.ensureReady();
        this.writable('rmdir');
        const st = await this.info(p);
        if (!st) {
            if (options?.force) return;
            throw new DirectoryNotFoundError(p);
        }
        if (st.type !== 'dir') throw new NotDirectoryError(p);
        try {
            await this.client.call('fs.remove', {
                sandbox: this.fsx.sandbox,
                path: this.resolveAbsolutePath(p),
                recursive: !!options?.recursive,
            });
        } catch (e) {
            if (errnoOf(e) === 'ENOTEMPTY' || errnoOf(e) === 'EEXIST') throw new DirectoryNotEmptyError(p);
            throw e;
        }
    }

    override async readdir(p: string, options?: ListOptions): Promise<FileEntry[]> {
        await this.ensureReady();
        const st = await this.info(p);
        if (!st) throw new DirectoryNotFoundError(p);
        if (st.type !== 'dir') throw new NotDirectoryError(p);
        const depth = options?.recursive ? Math.min(16, (options.maxDepth ?? 15) + 1) : 1;
        const root = this.resolveAbsolutePath(p);
        const exts = options?.extension ? (Array.isArray(options.extension) ? options.extension : [options.extension]) : null;
        const out: FileEntry[] = [];
        for (const e of await this.fsx.list(root, { depth })) {
            const name = posix.relative(root, e.path);
            const dir = e.type === 'dir' || (e.type === 'symlink' && (await this.info(posix.join(p, name)))?.type === 'dir');
            if (exts && !dir) {
                const ext = posix.extname(e.name);
                if (!exts.some((x) => x === ext || x === ext.slice(1))) continue;
            }
            out.push({
                name,
                type: dir ? 'directory' : 'file',
                ...(e.type === 'symlink' ? { isSymlink: true, symlinkTarget: e.symlinkTarget } : {}),
                ...(!dir && e.type !== 'symlink' ? { size: e.size } : {}),
            });
        }
        return out;
    }

    override async exists(p: string): Promise<boolean> {
        await this.ensureReady();
        return (await this.info(p)) !== null;
    }

    override async stat(p: string): Promise<FileStat> {
        await this.ensureReady();
        const st = (await this.info(p)) as { type: string; size: number; mtime: string } | null;
        if (!st) throw new FileNotFoundError(p);
        const abs = this.resolveAbsolutePath(p);
        return {
            name: posix.basename(abs),
            path: posix.relative(this.basePath, abs) || '.',
            type: st.type === 'dir' ? 'directory' : 'file',
            size: st.size,
            createdAt: new Date(st.mtime),
            modifiedAt: new Date(st.mtime),
        };
    }

    override async init(): Promise<void> {
        await this.client.call('fs.mkdir', { sandbox: this.fsx.sandbox, path: this.basePath, parents: true });
    }

    getInfo() {
        return {
            id: this.id,
            name: this.name,
            provider: this.provider,
            status: this.status,
            readOnly: this.readOnly,
            metadata: { sandbox: this.fsx.sandbox, basePath: this.basePath },
        };
    }
}
